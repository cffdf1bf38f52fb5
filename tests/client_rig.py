"""One agent's scripted task through the contextfold proxy, and the figures it leaves.

The rig: the agent's scripted upstream (``scripted_agents`` on ``FakeProvider``),
the service (``create_app`` under uvicorn on 127.0.0.1, API keys on, the
background runner compacting, the proxy's views given a small fixed budget so
the task overflows it) and the agent pointed at the service with a key of its
own: a CLI, unmodified (``agent_clis``), a minimal agent on an official SDK
(``sdk_agents``), or an agent run by a framework's own loop (``framework_agents``). Everything measured is read from outside: the
requests the upstream received, the service's own request counts
(``/metrics``), and the session's log, view and folds through the REST API.
Shared by ``tests/test_clients.py`` and ``bench/clients.py``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from agent_clis import CLAUDE_KEY_ENVS, Run, run_client
from fake_providers import FakeProvider, Request
from framework_agents import agents_sdk_agent, langchain_agent
from scripted_agents import Step, Wire, log_faults, pairing_faults, replies, task
from sdk_agents import anthropic_agent, chat_agent, responses_agent
from server_harness import bearer, make_service, running

from contextfold.core.messages import Message
from contextfold.core.tokens import get_counter
from contextfold.formats.anthropic_turns import read_request
from contextfold.formats.responses import request_messages
from contextfold.server.app import create_app
from contextfold.server.keys import create_key

Agent = Literal[
    "claude_code", "codex", "anthropic_sdk", "openai_sdk", "openai_chat", "agents_sdk", "langchain"
]
AGENTS: tuple[Agent, ...] = (
    "claude_code",
    "codex",
    "anthropic_sdk",
    "openai_sdk",
    "openai_chat",
    "agents_sdk",
    "langchain",
)
WIRE: dict[Agent, Wire] = {
    "claude_code": "messages",
    "codex": "responses",
    "anthropic_sdk": "messages",
    "openai_sdk": "responses",
    "openai_chat": "chat",
    "agents_sdk": "responses",
    "langchain": "chat",
}
ROUTE: dict[Wire, str] = {
    "messages": "/v1/messages",
    "responses": "/v1/responses",
    "chat": "/v1/chat/completions",
}
OneRun = Callable[..., Run]
IN_PROCESS: dict[Agent, OneRun] = {
    "anthropic_sdk": anthropic_agent,
    "openai_sdk": responses_agent,
    "openai_chat": chat_agent,
    "agents_sdk": agents_sdk_agent,
    "langchain": langchain_agent,
}
"""The agents run in this process: each keeps its conversation in the list it is given."""
PROMPT = "Run the commands the task needs, then say when you are done."
TENANT = "agents"
SESSION = "task-1"
ROOM = 2000
"""Budget tokens given beyond the CLI's first prompt (its system prompt and first message)."""


def scripted_upstream(wire: Wire) -> FakeProvider:
    """An upstream answering ``/v1/messages`` (Anthropic's), ``/v1/responses`` or
    ``/v1/chat/completions`` (OpenAI's)."""
    if wire == "messages":
        return FakeProvider("anthropic")
    upstream = FakeProvider("openai")
    upstream.routes = {("POST", ROUTE[wire])}
    return upstream


def base_for(wire: Wire, root: str) -> str:
    """The base URL a client of ``wire`` is given for a server at ``root``: Anthropic's
    clients add ``/v1`` themselves, OpenAI's do not."""
    return root if wire == "messages" else f"{root}/v1"


def prompt_of(turn: int) -> str:
    """The user's prompt of turn ``turn`` (from 1)."""
    return f"Part {turn}: {PROMPT}"


def run_agent(
    agent: Agent,
    root: str,
    work: Path,
    turn: int,
    *,
    key: str,
    session: str,
    key_env: str,
    home: Path | None = None,
    kept: list[Any] | None = None,
) -> Run:
    """Run ``agent`` on turn ``turn``'s prompt against the server at ``root``; later turns
    resume the conversation kept in ``home`` (a CLI's) or ``kept`` (an in-process agent's)."""
    base = base_for(WIRE[agent], root)
    prompt = prompt_of(turn)
    if agent in IN_PROCESS:
        if kept is None:
            kept = []
        if bool(kept) != (turn > 1):
            raise ValueError(f"turn {turn} of {agent} with {len(kept)} message(s) kept")
        return IN_PROCESS[agent](base, prompt, work, key=key, session=session, kept=kept)
    resume = turn > 1
    return run_client(
        agent,
        base,
        prompt,
        work,
        key=key,
        session=session,
        home=home,
        resume=resume,
        key_env=key_env,
    )


@dataclass
class Outcome:
    """What one run left, each count 0 when all went right."""

    client: Agent
    runs: list[Run]
    """One run per user turn."""
    scripts: list[list[Step]]
    """The task each turn was answered with."""
    sent: list[Request]
    """What the upstream received, in order."""
    calls: int
    """Calls the CLI made to the proxy's route (the service's own count)."""
    failed: int
    """Calls answered with another status than 200, plus 1 for each run that did not finish."""
    over_budget: list[int]
    """The forwarded prompts' token counts that exceed the view's budget."""
    pairs_broken: list[str]
    log_faults: list[str]
    budget: int
    folds: int
    """Folds the view made, superseded ones included: compaction really happened when above 0."""
    largest_prompt: int
    job: dict[str, Any] | None
    """The view's compaction job at the end: None once it is idle."""

    def problems(self) -> list[str]:
        """Each thing that went wrong, said in a line."""
        found = [f"a run failed: {r.describe()}" for r in self.runs if r.code != 0]
        if self.failed:
            found.append(f"{self.failed} call(s) failed")
        found += [f"a prompt of {n} tokens, over {self.budget}" for n in self.over_budget]
        if self.job is not None:
            found.append(f"the view's compaction job did not settle: {self.job}")
        return found + self.pairs_broken + self.log_faults

    def figures(self) -> dict[str, int]:
        return {
            "calls_made": self.calls,
            "calls_failed": self.failed,
            "prompts_over_budget": len(self.over_budget),
            "tool_pairs_broken": len(self.pairs_broken),
            "log_messages_missing_or_duplicated": len(self.log_faults),
            "folds_made": self.folds,
            "budget": self.budget,
            "largest_prompt_tokens": self.largest_prompt,
        }


@contextmanager
def proxy(upstream: FakeProvider, budget: int) -> Iterator[tuple[str, str]]:
    """The service proxying to ``upstream`` with views of ``budget`` tokens: (base URL, key)."""
    root = upstream.url.removesuffix("/v1")
    spec = (
        f"anthropic:{root}/v1"
        if upstream.protocol == "anthropic"
        else f"openai-compatible:{root}/v1"
    )
    service = make_service(upstream=(spec,), budget=budget, runner_processes=0)
    key = create_key(service.memory, TENANT)
    with running(create_app(service)) as base:
        yield base, key


def first_prompt(agent: Agent, work: Path, key_env: str) -> int:
    """The tokens of the agent's first prompt (system prompt, first messages), from a run
    of one call straight against its scripted upstream."""
    wire = WIRE[agent]
    with scripted_upstream(wire) as upstream:
        upstream.add(*replies(wire, task(0, tag="probe")))
        root = upstream.url.removesuffix("/v1")
        run = run_agent(agent, root, work, 1, key="sk-probe", session="probe", key_env=key_env)
    if run.code != 0 or len(upstream.requests) != 1:
        raise RuntimeError(f"the probe run of {agent} failed: {run.describe()}")
    return prompt_tokens(wire, upstream.requests[0].body)


def through_proxy(
    client: Agent,
    work: Path,
    *,
    steps: int,
    lines: int,
    room: int,
    turns: int = 1,
    key_env: str = CLAUDE_KEY_ENVS[0],
) -> Outcome:
    """Run ``client`` (a CLI or an SDK agent) through the proxy on a task of ``steps`` tool
    calls of ``lines`` lines each, its views' budget ``room`` tokens over what its first
    prompt takes; with ``turns`` above 1, the client is run again on a new prompt that many
    times, each resuming the conversation (``key_env``: where Claude Code reads its key)."""
    wire = WIRE[client]
    scripts = [task(steps, lines=lines, tag=f"t{t}") for t in range(1, turns + 1)]
    work.mkdir(parents=True, exist_ok=True)
    home = work.parent / "home"
    home.mkdir(exist_ok=True)
    budget = first_prompt(client, work, key_env) + room
    with scripted_upstream(wire) as upstream, proxy(upstream, budget) as (base, key):
        runs: list[Run] = []
        kept: list[Any] = []
        for t, script in enumerate(scripts, 1):
            upstream.add(*replies(wire, script))
            runs.append(
                run_agent(
                    client,
                    base,
                    work,
                    t,
                    key=key,
                    session=SESSION,
                    key_env=key_env,
                    home=home,
                    kept=kept,
                )
            )
        with httpx.Client(base_url=base, headers=bearer(key), timeout=30) as api:
            statuses = route_statuses(api, ROUTE[wire])
            log = whole_log(api, SESSION)
            view = settled_view(api, SESSION)
            folds = api.get(
                f"/api/v1/sessions/{SESSION}/views/default/folds", params={"superseded": "true"}
            ).raise_for_status()
    # The wire's route only: the proxy also asks an Anthropic upstream to count tokens.
    sent = [r for r in upstream.requests if r.path.split("?")[0] == ROUTE[wire]]
    sizes = [prompt_tokens(wire, r.body) for r in sent]
    view_budget = int(view["config"]["budget"])
    return Outcome(
        client=client,
        runs=runs,
        scripts=scripts,
        sent=sent,
        calls=sum(statuses.values()),
        failed=sum(n for s, n in statuses.items() if s != "200") + sum(r.code != 0 for r in runs),
        over_budget=[n for n in sizes if n > view_budget],
        pairs_broken=[
            f"call {i}: {f}" for i, r in enumerate(sent) for f in pairing_faults(wire, r.body)
        ],
        log_faults=log_faults([(prompt_of(t), s) for t, s in enumerate(scripts, 1)], log),
        budget=view_budget,
        folds=len(folds.json()["folds"]),
        largest_prompt=max(sizes, default=0),
        job=view["job"],
    )


def settled_view(api: httpx.Client, sid: str, timeout: float = 60.0) -> dict[str, Any]:
    """The default view once its compaction job is done (or has failed), and no job is
    still to come (its rendering leaves nothing out): what it ends with. On a loaded
    machine the runner may not have planned the last job when the client finishes."""
    deadline = time.monotonic() + timeout
    path = f"/api/v1/sessions/{sid}/views/default"
    while True:
        view: dict[str, Any] = api.get(path).raise_for_status().json()
        job = view["job"]
        if time.monotonic() > deadline or (
            job is not None and job["state"] in ("parked", "failing")
        ):
            return view
        if (
            job is None
            and api.get(f"{path}/render").raise_for_status().json()["report"]["omitted"] == 0
        ):
            return view
        time.sleep(0.1)


def route_statuses(api: httpx.Client, route: str) -> dict[str, int]:
    """The service's count of requests to ``route`` by status, from its ``/metrics``."""
    text = api.get("/metrics").raise_for_status().text
    pattern = re.compile(r"^contextfold_http_requests_total\{([^}]*)\} ([0-9.e+]+)$", re.MULTILINE)
    found: dict[str, int] = {}
    for labels, value in pattern.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("route") == route and fields.get("method") == "POST":
            found[fields["status"]] = found.get(fields["status"], 0) + int(float(value))
    return found


def whole_log(api: httpx.Client, sid: str) -> list[dict[str, Any]]:
    """Every logged message of ``sid``, a page at a time, through the REST API."""
    found: list[dict[str, Any]] = []
    after: int | None = 0
    while after is not None:
        page = api.get(f"/api/v1/sessions/{sid}/messages", params={"after": after}).json()
        found += [record["message"] for record in page["messages"]]
        after = page["next_after"]
    return found


def prompt_tokens(wire: Wire, body: dict[str, Any]) -> int:
    """A forwarded request's prompt in contextfold's tokens, read back as log messages."""
    return get_counter().messages(read_back(wire, body))


def read_back(wire: Wire, body: dict[str, Any]) -> list[Message]:
    """A forwarded request's prompt as the log messages it was written from (as the proxy
    reads a client's request), less what the reader infers rather than reads: the ``name``
    it gives a Messages tool result from its call (a ``tool_result`` block has none)."""
    if wire == "responses":
        return request_messages(body)
    if wire == "chat":
        return list(body["messages"])
    return [
        {k: v for k, v in m.items() if not (k == "name" and m["role"] == "tool")}
        for m in read_request(body.get("system"), body["messages"])
    ]
