"""``contextfold mcp`` through the MCP SDK's own clients: stdio and streamable HTTP.

One SQLite store holds two tenants' sessions under the same id (``s1``), each
with words only it has, and a session only the second tenant has. The server
runs as a real process of the console script: spawned by the SDK's
``stdio_client`` (``--tenant``), or serving HTTP on 127.0.0.1 (the tenant of
each request's API key), reached by ``streamable_http_client``. Every tool is
called, the model's mistakes come back as tool errors naming the field, and
every attempt at another tenant's session finds nothing of it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from contextfold import Memory
from contextfold.cli import main
from contextfold.memory.recall_tools import EXPAND, FOLDS, SEARCH, tool_definitions
from contextfold.server.keys import create_key
from contextfold.server.mcp_server import RecallServer

CLI = str(Path(sys.executable).with_name("contextfold"))
FILLER = " ".join(["the weather was mild and the meeting ran long"] * 6)
ACME_WORD = "zanzibar"
OTHER_WORD = "quokka"
START_S = 60.0

Client = ClientSession


def conversation(word: str, rounds: int = 40) -> list[dict[str, Any]]:
    """Rounds of filler; round 3 carries ``word`` and a code made of it."""
    messages: list[dict[str, Any]] = []
    for i in range(rounds):
        said = f"the {word} ferry code is {word.upper()}-{i}. " if i == 3 else ""
        messages.append({"role": "user", "content": f"turn {i}: {said}{FILLER}"})
        messages.append({"role": "assistant", "content": f"reply {i}: noted. {FILLER}"})
    return messages


@dataclass(frozen=True)
class Stored:
    """The store the servers read, and the keys of its tenants."""

    path: str
    acme_key: str
    other_key: str
    revoked_key: str


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    path = str(tmp_path_factory.mktemp("mcp") / "mcp.db")
    with Memory(path) as memory:
        for tenant, word in (("acme", ACME_WORD), ("other", OTHER_WORD)):
            session = memory.session(f"{tenant}/s1", system="You help.")
            session.extend(conversation(word))
            session.view("default", preset="offline", budget=1500).compact()
        brief = memory.existing_session("acme/s1").view("brief", preset="offline", budget=800)
        brief.compact()
        only = memory.session("other/only-other", system="You help.")
        only.extend(conversation(OTHER_WORD, rounds=4))
        acme_key = create_key(memory, "acme")
        other_key = create_key(memory, "other")
        revoked_key = create_key(memory, "acme", "revoked")
        assert memory.api_keys.revoke(revoked_key.split("_")[1])
    return Stored(path, acme_key, other_key, revoked_key)


def folds_of(path: str, session_id: str, view: str) -> list[Any]:
    with Memory(path) as memory:
        return memory.existing_session(session_id).view(view).folds()


def snapshot(path: str) -> dict[str, Any]:
    """What a call might change: the sessions, each log's length, each session's views."""
    with Memory(path) as memory:
        ids = memory.sessions()
        return {
            sid: (memory.existing_session(sid).last_seq(), memory.existing_session(sid).views())
            for sid in ids
        }


# -- the SDK's clients ------------------------------------------------------------


@asynccontextmanager
async def over_stdio(path: str, *options: str) -> AsyncIterator[Client]:
    """A client session with ``contextfold mcp`` spawned by the SDK's stdio client."""
    params = StdioServerParameters(command=CLI, args=["mcp", "--store", path, *options])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


@asynccontextmanager
async def over_http(base: str, key: str | None) -> AsyncIterator[Client]:
    """A client session with the HTTP server through the SDK's streamable HTTP client."""
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def run(work: Callable[[], Awaitable[None]]) -> None:
    anyio.run(work)


async def call(client: Client, name: str, **arguments: Any) -> types.CallToolResult:
    result = await client.call_tool(name, arguments)
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    assert json.loads(content.text) == result.structured_content
    return result


def answer(result: types.CallToolResult) -> dict[str, Any]:
    found: dict[str, Any] = result.structured_content
    return found


def text_of(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


# -- stdio ------------------------------------------------------------------------


def assert_recall_tools(tools: list[types.Tool]) -> None:
    """``tools`` are the recall tools, each also taking ``session`` (required) and ``view``."""
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == {SEARCH, EXPAND, FOLDS}
    for definition in tool_definitions():
        function = definition["function"]
        tool = by_name[function["name"]]
        schema = tool.input_schema
        assert tool.description == function["description"]
        own = function["parameters"]
        assert schema["properties"] == {
            "session": schema["properties"]["session"],
            "view": schema["properties"]["view"],
            **own["properties"],
        }
        assert schema["required"] == ["session", *own.get("required", [])]
        assert schema["additionalProperties"] is False
        assert tool.annotations is not None and tool.annotations.read_only_hint


def test_each_tool_answers_over_stdio(stored: Stored) -> None:
    (fold,) = folds_of(stored.path, "acme/s1", "default")
    brief = folds_of(stored.path, "acme/s1", "brief")
    assert {f.id for f in brief} != {fold.id}
    before = snapshot(stored.path)

    async def work() -> None:
        async with over_stdio(stored.path, "--tenant", "acme") as client:
            assert_recall_tools((await client.list_tools()).tools)
            found = await call(client, SEARCH, session="s1", query=f"{ACME_WORD} ferry")
            assert not found.is_error
            (hit,) = answer(found)["hits"]
            assert hit["role"] == "user" and hit["seq"] == 8  # the system prompt is seq 1
            assert ACME_WORD in hit["snippet"]
            assert (hit["fold"], hit["folded"]) == (fold.id, [fold.start, fold.end])

            listed = answer(await call(client, FOLDS, session="s1"))["folds"]
            assert [(f["id"], f["start"], f["end"]) for f in listed] == [
                (fold.id, fold.start, fold.end)
            ]
            in_brief = answer(await call(client, FOLDS, session="s1", view="brief"))["folds"]
            assert {f["id"] for f in in_brief} == {f.id for f in brief}

            expanded = answer(await call(client, EXPAND, session="s1", id=fold.id))
            assert (expanded["fold"], expanded["start"], expanded["end"]) == (
                fold.id,
                fold.start,
                fold.end,
            )
            assert expanded["messages"][0]["seq"] == fold.start
            assert expanded["next_cursor"] is not None  # 78 messages do not fit 2000 tokens
            ranged = answer(await call(client, EXPAND, session="s1", start=8, end=9))
            assert [m["seq"] for m in ranged["messages"]] == [8, 9]
            assert f"{ACME_WORD.upper()}-3" in ranged["messages"][0]["content"]

    run(work)
    assert snapshot(stored.path) == before  # the tools only read


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    (SEARCH, {"query": ACME_WORD}, "session"),
    (SEARCH, {"session": 7, "query": ACME_WORD}, "session"),
    (SEARCH, {"session": "", "query": ACME_WORD}, "session"),
    (SEARCH, {"session": "nowhere", "query": ACME_WORD}, "session"),
    (SEARCH, {"session": "s1"}, "query"),
    (SEARCH, {"session": "s1", "query": ACME_WORD, "limit": 0}, "limit"),
    (SEARCH, {"session": "s1", "query": ACME_WORD, "role": "robot"}, "role"),
    (SEARCH, {"session": "s1", "query": ACME_WORD, "after": "yesterday"}, "after"),
    (SEARCH, {"session": "s1", "query": ACME_WORD, "colour": "red"}, "colour"),
    (SEARCH, {"session": "s1", "view": "nope", "query": ACME_WORD}, "view"),
    (SEARCH, {"session": "s1", "view": "a/b", "query": ACME_WORD}, "view"),
    (FOLDS, {"session": "s1", "cursor": "soon"}, "cursor"),
    (EXPAND, {"session": "s1"}, "start"),
    (EXPAND, {"session": "s1", "id": "no-such-fold"}, "id"),
    (EXPAND, {"session": "s1", "start": 9, "end": 3}, "end"),
]


def test_a_models_mistake_is_a_tool_error_naming_the_field(stored: Stored) -> None:
    before = snapshot(stored.path)

    async def work() -> None:
        async with over_stdio(stored.path, "--tenant", "acme") as client:
            for name, arguments, field in BAD_CALLS:
                result = await call(client, name, **arguments)
                assert result.is_error, (name, arguments)
                assert answer(result)["field"] == field, (name, arguments, answer(result))
            with pytest.raises(MCPError, match="unknown tool 'contextfold_nope'"):
                await client.call_tool("contextfold_nope", {"session": "s1"})
            # The server is still there and answers.
            found = await call(client, SEARCH, session="s1", query=ACME_WORD)
            assert not found.is_error and answer(found)["hits"]

    run(work)
    assert snapshot(stored.path) == before


# Ways to name the other tenant's sessions: its own id, its store id, paths around the
# tenant prefix. None may read anything of it.
CROSS_TENANT = ["only-other", "other/only-other", "other/s1", "../other/s1", "acme/../other/s1"]


async def cross_tenant_leaks(client: Client, word: str) -> tuple[int, int]:
    """Try every way to reach the other tenant's sessions with every tool: (tries, leaks).

    A leak is an answer holding the code only the other tenant's log has (a search
    echoes its query, and the code is in none), or one that is not an error.
    """
    secret = f"{word.upper()}-3"
    tries = leaks = 0
    for session in CROSS_TENANT:
        for name, arguments in (
            (SEARCH, {"query": word}),
            (FOLDS, {}),
            (EXPAND, {"start": 1, "end": 40}),
        ):
            result = await call(client, name, session=session, **arguments)
            tries += 1
            if not result.is_error or secret in text_of(result):
                leaks += 1
            assert answer(result)["field"] == "session"
    # The session both tenants have: only the caller's own is read.
    for name, arguments in (
        (SEARCH, {"query": word}),
        (EXPAND, {"start": 1, "end": 81}),
        (EXPAND, {"start": 1, "end": 81, "page": 2}),
    ):
        result = await call(client, name, session="s1", **arguments)
        tries += 1
        leaks += secret in text_of(result) or bool(answer(result).get("hits"))
    return tries, leaks


def test_over_stdio_another_tenants_session_is_not_found(stored: Stored) -> None:
    async def work() -> None:
        async with over_stdio(stored.path, "--tenant", "acme") as client:
            tries, leaks = await cross_tenant_leaks(client, OTHER_WORD)
            assert (tries, leaks) == (18, 0)
            own = await call(client, SEARCH, session="s1", query=ACME_WORD)
            assert answer(own)["hits"]
        # The other tenant reads its own sessions, and nothing of acme's.
        async with over_stdio(stored.path, "--tenant", "other") as client:
            own = await call(client, SEARCH, session="only-other", query=OTHER_WORD)
            assert answer(own)["hits"]
            found = await call(client, SEARCH, session="s1", query=ACME_WORD)
            assert answer(found)["hits"] == []

    run(work)


def test_the_default_tenant_is_the_services_local(stored: Stored) -> None:
    with Memory(stored.path) as memory:
        memory.session("local/mine", system="You help.").extend(conversation("marmalade", 4))
    before = snapshot(stored.path)
    assert before["local/mine"][1] == []  # no view: the tools read the log, store none

    async def work() -> None:
        async with over_stdio(stored.path) as client:
            found = await call(client, SEARCH, session="mine", query="marmalade")
            assert answer(found)["hits"]
            assert answer(await call(client, FOLDS, session="mine"))["folds"] == []
            assert (await call(client, SEARCH, session="s1", query=ACME_WORD)).is_error

    run(work)
    assert snapshot(stored.path) == before


# -- streamable HTTP --------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def http_base(stored: Stored, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``contextfold mcp --http`` on a free port, once it answers; stopped by SIGTERM."""
    port = free_port()
    log = tmp_path_factory.mktemp("mcp-http") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [CLI, "mcp", "--http", "--port", str(port), "--store", stored.path],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"mcp --http exited {process.returncode}: {log.read_text()}")
        try:
            if httpx.post(f"{base}/mcp", timeout=1.0).status_code == 401:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("mcp --http did not answer in time")
        time.sleep(0.1)
    try:
        yield base
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0, log.read_text()


def test_each_tool_answers_over_http_within_the_keys_tenant(stored: Stored, http_base: str) -> None:
    (fold,) = folds_of(stored.path, "acme/s1", "default")

    async def work() -> None:
        async with over_http(http_base, stored.acme_key) as client:
            assert_recall_tools((await client.list_tools()).tools)
            found = answer(await call(client, SEARCH, session="s1", query=ACME_WORD))
            assert [hit["seq"] for hit in found["hits"]] == [8]
            listed = answer(await call(client, FOLDS, session="s1"))["folds"]
            assert [f["id"] for f in listed] == [fold.id]
            expanded = answer(await call(client, EXPAND, session="s1", start=8, end=8))
            assert ACME_WORD in expanded["messages"][0]["content"]
            error = await call(client, SEARCH, session="s1")
            assert error.is_error and answer(error)["field"] == "query"
            tries, leaks = await cross_tenant_leaks(client, OTHER_WORD)
            assert (tries, leaks) == (18, 0)
        async with over_http(http_base, stored.other_key) as client:
            mine = answer(await call(client, SEARCH, session="s1", query=OTHER_WORD))
            assert [hit["seq"] for hit in mine["hits"]] == [8]
            theirs = answer(await call(client, SEARCH, session="s1", query=ACME_WORD))
            assert theirs["hits"] == []

    run(work)


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def test_http_refuses_a_missing_or_wrong_key(stored: Stored, http_base: str) -> None:
    wrong = {
        "no key": {},
        "not a bearer": {"Authorization": f"Basic {stored.acme_key}"},
        "not a contextfold key": {"Authorization": "Bearer sk-123"},
        "unknown key": {"Authorization": "Bearer cf_0123456789ab_" + "A" * 32},
        "wrong secret": {"Authorization": f"Bearer {stored.acme_key[:-4]}AAAA"},
        "revoked key": {"Authorization": f"Bearer {stored.revoked_key}"},
        "a wrong key in the service's other header": {"x-api-key": stored.revoked_key},
    }
    accept = {"Accept": "application/json, text/event-stream"}
    for why, headers in wrong.items():
        refused = httpx.post(f"{http_base}/mcp", json=INITIALIZE, headers={**accept, **headers})
        assert refused.status_code == 401, why
        assert refused.json()["error"]["code"] == "unauthorized", why
        assert refused.headers["www-authenticate"] == 'Bearer realm="contextfold"'
    for right in ({"Authorization": f"Bearer {stored.acme_key}"}, {"x-api-key": stored.acme_key}):
        answered = httpx.post(f"{http_base}/mcp", json=INITIALIZE, headers={**accept, **right})
        assert answered.status_code == 200, answered.text
    # A good key from a page reached by DNS rebinding: its Host is not a loopback name.
    rebound = {"Authorization": f"Bearer {stored.acme_key}", "Host": "evil.example", **accept}
    assert httpx.post(f"{http_base}/mcp", json=INITIALIZE, headers=rebound).status_code == 421

    async def without_key() -> None:
        async with over_http(http_base, None) as client:
            await client.list_tools()

    with pytest.raises(BaseException) as refused_client:
        run(without_key)
    assert any(isinstance(leaf, MCPError) for leaf in leaves(refused_client.value))


# -- the command ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--http", "--tenant", "acme"], "tenant"),
        (["--tenant", "Not A Tenant"], "tenant"),
        (["--max-tokens", "50"], "max_tokens"),
        (["--http", "--port", "70000"], "port"),
    ],
)
def test_the_command_refuses_bad_options(
    argv: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "--store", str(tmp_path / "x.db"), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"contextfold: error: field '{field}': ")


def test_a_store_that_does_not_answer_is_a_tool_error(stored: Stored) -> None:
    memory = Memory(stored.path)
    server = RecallServer(memory, lambda ctx: "acme")
    arguments = {"session": "s1", "query": ACME_WORD}
    assert not server.answer("acme", SEARCH, arguments).is_error
    memory.close()
    failed = server.answer("acme", SEARCH, arguments)
    assert failed.is_error
    assert answer(failed) == {
        "error": f"the store did not answer: store {stored.path!r} is closed",
        "field": None,
    }


def test_over_stdio_on_postgresql(tmp_path: Path) -> None:
    """A store that waits on a network: the calls run off the server's loop, same answers."""
    from pg import fresh_schema, require_postgres, url

    require_postgres()
    with fresh_schema() as schema:
        database = url(schema)
        with Memory(database) as memory:
            for tenant, word in (("acme", ACME_WORD), ("other", OTHER_WORD)):
                memory.session(f"{tenant}/s1", system="You help.").extend(conversation(word, 6))

        async def work() -> None:
            async with over_stdio(database, "--tenant", "acme") as client:
                found = answer(await call(client, SEARCH, session="s1", query=ACME_WORD))
                assert [hit["seq"] for hit in found["hits"]] == [8]
                tries, leaks = await cross_tenant_leaks(client, OTHER_WORD)
                assert (tries, leaks) == (18, 0)

        run(work)
