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
from fake_providers import FakeProvider
from scripted_agents import Wire, pairing_faults, replies, task, tool_results

WIRE: dict[Client, Wire] = {"claude_code": "messages", "codex": "responses"}
PROMPT = "Run the commands the task needs, then say when you are done."


def scripted_upstream(client: Client) -> FakeProvider:
    """Claude Code's upstream answers ``/v1/messages``; Codex's ``/v1/responses``."""
    if client == "claude_code":
        return FakeProvider("anthropic")
    upstream = FakeProvider("openai")
    upstream.routes = {("POST", "/v1/responses")}
    return upstream


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
    assert [r.path.split("?")[0] for r in upstream.requests] == [
        "/v1/messages" if wire == "messages" else "/v1/responses"
    ] * len(steps)
    for n, request in enumerate(upstream.requests):
        assert request.headers["x-contextfold-session"] == "s1"
        assert request.headers["authorization"] == "Bearer sk-scripted"
        assert request.body["stream"] is True
        assert pairing_faults(wire, request.body) == [], n
        results = tool_results(wire, request.body)
        assert len(results) == n
        for step, result in zip(steps[:n], results, strict=True):
            assert step.marker in result
