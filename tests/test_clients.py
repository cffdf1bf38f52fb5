"""Claude Code and Codex CLI, unmodified, run a multi-turn tool-using task.

Each runs a scripted task (``scripted_agents``): shell commands asked for by
its upstream, then a text answer. First straight against a scripted upstream
of its protocol on 127.0.0.1, which proves the scripts are what each CLI
accepts; then through the proxy (``client_rig``), with a budget the task
overflows, beside a minimal agent on each official SDK (the ``openai`` one on
Chat Completions and on Responses) and an agent run by each framework's own
loop (the OpenAI Agents SDK, LangChain): every call succeeds,
every forwarded prompt fits the view's budget, tool calls and results stay
paired, and the log holds every message once, in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_clis import CLAUDE_KEY_ENVS, CLIENTS, Client, need_cli, run_client
from client_rig import AGENTS, PROMPT, ROUTE, WIRE, Agent, scripted_upstream, through_proxy
from scripted_agents import Step, log_faults, pairing_faults, replies, task, tool_results


@pytest.mark.parametrize("client", CLIENTS)
def test_a_cli_runs_its_tool_task_against_the_scripted_upstream(
    client: Client, tmp_path: Path
) -> None:
    need_cli(client)
    wire = WIRE[client]
    steps = task(2)
    work = tmp_path / "work"
    work.mkdir()
    with scripted_upstream(WIRE[client]) as upstream:
        upstream.add(*replies(wire, steps))
        run = run_client(client, upstream.url, PROMPT, work, key="sk-scripted", session="s1")
    assert run.code == 0, run.describe()
    assert steps[-1].text in run.answer, run.describe()
    assert [r.path.split("?")[0] for r in upstream.requests] == [ROUTE[wire]] * len(steps)
    for n, request in enumerate(upstream.requests):
        assert request.headers["x-contextfold-session"] == "s1"
        if client == "claude_code":  # its key from ANTHROPIC_API_KEY
            assert request.headers["x-api-key"] == "sk-scripted"
        else:
            assert request.headers["authorization"] == "Bearer sk-scripted"
        assert request.body["stream"] is True
        assert pairing_faults(wire, request.body) == [], n
        results = tool_results(wire, request.body)
        assert len(results) == n
        for step, result in zip(steps[:n], results, strict=True):
            assert step.marker in result


@pytest.mark.parametrize("client", AGENTS)
def test_an_agent_runs_a_longer_task_through_the_proxy_compacted_within_budget(
    client: Agent, tmp_path: Path
) -> None:
    """Every call succeeds, every forwarded prompt fits the view's budget, tool calls and
    results stay paired, and the log holds every message once, in order: for each CLI,
    for a minimal agent on each official SDK and for each framework's own agent loop."""
    if client in CLIENTS:
        need_cli(client)
    outcome = through_proxy(client, tmp_path / "work", steps=8, lines=120, room=1500)
    assert outcome.problems() == []
    [steps] = outcome.scripts
    assert outcome.calls == len(steps) == len(outcome.sent)
    assert steps[-1].text in outcome.runs[0].answer
    assert outcome.folds > 0, "the task never overflowed the budget: nothing was compacted"


@pytest.mark.parametrize("client", AGENTS)
def test_an_agent_resumed_for_a_second_prompt_goes_on_in_the_same_session(
    client: Agent, tmp_path: Path
) -> None:
    """``claude -p --continue``, ``codex exec resume --last`` and an in-process agent given
    its kept conversation send the first run's conversation again with the new prompt: the
    proxy goes on from the log, compacted."""
    if client in CLIENTS:
        need_cli(client)
    outcome = through_proxy(client, tmp_path / "work", steps=4, lines=120, room=1500, turns=2)
    assert outcome.problems() == []
    assert outcome.calls == sum(len(s) for s in outcome.scripts) == len(outcome.sent)
    answers = [r.answer for r in outcome.runs]
    assert answers == [f"All done: t{t}-finished" for t in (1, 2)]
    assert outcome.folds > 0


def logged(prompt: str, steps: list[Step]) -> list[dict[str, Any]]:
    """The messages a turn leaves in the log when all goes right."""
    log: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
    for n, step in enumerate(steps):
        answer: dict[str, Any] = {"role": "assistant", "content": step.text}
        if step.command is not None:
            call = {
                "id": f"c{n}",
                "type": "function",
                "function": {"name": "sh", "arguments": "{}"},
            }
            answer["tool_calls"] = [call]
        log.append(answer)
        if step.command is not None:
            log.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"{step.marker}\n1"})
    return log


def test_the_log_check_finds_a_message_missing_twice_or_out_of_order() -> None:
    steps, later = task(3, tag="a"), task(1, tag="b")
    turns = [("first", steps), ("second", later)]
    system = {"role": "system", "content": "You are an agent."}
    log = [system, *logged("first", steps)]
    assert log_faults(turns[:1], log) == []
    assert log_faults(turns, [*log, *logged("second", later)]) == []
    assert log_faults(turns[:1], log[:4] + log[5:])  # a tool result missing
    assert log_faults(turns[:1], log[:4] + log[3:])  # an answer twice
    assert log_faults(turns[:1], log[:2] + log[4:6] + log[2:4] + log[6:])  # two steps swapped
    assert log_faults(turns[:1], log[:1] + log[2:])  # the prompt missing
    assert log_faults(turns[:1], [*log, log[1]])  # the prompt again at the end
    assert log_faults(turns, [*log, *logged("second", later), *logged("second", later)])
    assert log_faults(turns, [*log, *logged("first", later)])  # the second prompt is not there


def test_the_pairing_check_finds_a_call_without_its_result_and_a_result_without_its_call() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    user = {"type": "message", "role": "user", "content": "go"}
    assert pairing_faults("responses", {"input": [user, call, output]}) == []
    assert pairing_faults("responses", {"input": [user, call]}) != []
    assert pairing_faults("responses", {"input": [user, output]}) != []
    use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
    turns = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]
    assert pairing_faults("messages", {"messages": turns}) == []
    assert pairing_faults("messages", {"messages": [*turns[:2], {"role": "user", "content": "x"}]})
    assert pairing_faults("messages", {"messages": [turns[0], turns[2]]})
    asked = {"id": "call_1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    chat = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [asked]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    assert pairing_faults("chat", {"messages": chat}) == []
    assert pairing_faults("chat", {"messages": chat[:2]})
    assert pairing_faults("chat", {"messages": [chat[0], chat[2]]})


def test_claude_code_reaches_the_proxy_with_its_key_in_either_variable(tmp_path: Path) -> None:
    """``ANTHROPIC_AUTH_TOKEN`` goes as ``Authorization: Bearer``, ``ANTHROPIC_API_KEY`` as
    ``x-api-key``: the proxy takes the contextfold key from either."""
    need_cli("claude_code")
    for key_env in CLAUDE_KEY_ENVS:
        work = tmp_path / key_env / "work"
        outcome = through_proxy("claude_code", work, steps=1, lines=5, room=1500, key_env=key_env)
        assert outcome.problems() == [], key_env
        assert outcome.calls == 2
