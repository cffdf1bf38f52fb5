"""Claude Code and Codex CLI, unmodified, run a multi-turn tool-using task.

Each CLI runs a scripted task (``scripted_agents``): two shell commands asked
for by its upstream, then a text answer. First straight against a scripted
upstream of its protocol on 127.0.0.1, which proves the scripts are what each
CLI accepts and shows what it sends.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_clis import CLIENTS, Client, need_cli, run_client
from client_rig import PROMPT, ROUTE, WIRE, scripted_upstream, through_proxy
from scripted_agents import pairing_faults, replies, task, tool_results


@pytest.mark.parametrize("client", CLIENTS)
def test_a_cli_runs_its_tool_task_against_the_scripted_upstream(
    client: Client, tmp_path: Path
) -> None:
    need_cli(client)
    wire = WIRE[client]
    steps = task(2)
    work = tmp_path / "work"
    work.mkdir()
    with scripted_upstream(client) as upstream:
        upstream.add(*replies(wire, steps))
        run = run_client(client, upstream.url, PROMPT, work, key="sk-scripted", session="s1")
    assert run.code == 0, run.describe()
    assert steps[-1].text in run.answer, run.describe()
    assert [r.path.split("?")[0] for r in upstream.requests] == [ROUTE[wire]] * len(steps)
    for n, request in enumerate(upstream.requests):
        assert request.headers["x-contextfold-session"] == "s1"
        assert request.headers["authorization"] == "Bearer sk-scripted"
        assert request.body["stream"] is True
        assert pairing_faults(wire, request.body) == [], n
        results = tool_results(wire, request.body)
        assert len(results) == n
        for step, result in zip(steps[:n], results, strict=True):
            assert step.marker in result


@pytest.mark.parametrize("client", ["codex"])
def test_a_cli_runs_a_longer_task_through_the_proxy_compacted_within_budget(
    client: Client, tmp_path: Path
) -> None:
    """Every call succeeds, every forwarded prompt fits the view's budget, tool calls and
    results stay paired, and the log holds every message once, in order."""
    need_cli(client)
    outcome = through_proxy(client, tmp_path / "work", steps=8, lines=120, room=1500)
    assert outcome.problems() == []
    assert outcome.calls == len(outcome.steps) == len(outcome.sent)
    assert outcome.steps[-1].text in outcome.run.answer
    assert outcome.folds > 0, "the task never overflowed the budget: nothing was compacted"
