"""Branches: regenerate and edit through the proxy, branches rendered, old files migrated.

Three processes on 127.0.0.1, as ``bench/proxy.py`` runs them: a scripted
OpenAI-compatible upstream (asyncio; each answer names the digest of the
messages it was sent, and is new each call), the service (SQLite, the
background runner on) and this client. Each session is a conversation of
``TURNS`` rounds; then the client regenerates the last answer (the same list
without it), edits an earlier question (the list up to it, changed) and drops a
turn (the list without its second-to-last round). ``round_trips_*``: calls
made and failed (goal: none), and ``prompts_matching``: calls whose forwarded
prompt was exactly the client's list (the budget holds every message, so the
branch the call continues is sent whole; goal: all). Then every branch of every
session is read through the REST API and rendered (``branches_rendered``, goal:
all, each render equal to that branch's messages).

``migrated_*``: a SQLite file written with the schema before branches (its
migrations only, rows written raw as that code wrote them) is opened by this
code: every message read back unchanged (goal: all), each session one branch,
and the time the migration took.

``--before SRC`` (a ``src`` folder of the code before branches, e.g. a checkout
of an older commit) times a single-branch session in both, alternating, in
processes of their own: append latency and fresh and cached render on SQLite
(``*_ratio`` is after / before; goal: about 1).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import proxy as proxied
from _common import ROOT, parse_args, report

TURNS = 6
BEFORE_BRANCHES = "009_branches"


def digest_of(messages: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


async def _serve_upstream(port: int) -> None:
    """Answers each chat completion at once: ``answer N to DIGEST`` of what it was sent."""
    calls = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                sent = json.loads(await reader.readexactly(length))
                calls += 1
                text = f"answer {calls} to {digest_of(sent['messages'])}"
                body = json.dumps(
                    {
                        "id": f"chatcmpl-{calls}",
                        "object": "chat.completion",
                        "created": 1_700_000_000,
                        "model": "bench",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                ).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


class Calls:
    """The client's side of the round trips: what was sent, what came back."""

    def __init__(self, client: httpx.Client, url: str, key: str) -> None:
        self.client, self.url, self.key = client, url, key
        self.made = self.failed = self.matching = 0

    def send(self, sid: str, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        self.made += 1
        headers = {"authorization": f"Bearer {self.key}", "x-contextfold-session": sid}
        answer = self.client.post(
            f"{self.url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": messages},
            headers=headers,
        )
        if answer.status_code != 200:
            self.failed += 1
            return None
        message: dict[str, Any] = answer.json()["choices"][0]["message"]
        if message["content"].endswith(f" to {digest_of(messages)}"):
            self.matching += 1
        return {"role": "assistant", "content": message["content"]}


def round_trips(calls: Calls, sessions: int) -> dict[str, int]:
    kinds = {"extend": 0, "regenerate": 0, "edit": 0, "drop_turn": 0}
    for s in range(sessions):
        sid = f"bench-{s}"
        conversation: list[dict[str, Any]] = [{"role": "system", "content": "You help."}]
        for turn in range(TURNS):
            conversation.append({"role": "user", "content": f"session {s}, question {turn}"})
            answer = calls.send(sid, conversation)
            kinds["extend"] += 1
            conversation.append(answer or {"role": "assistant", "content": "(failed)"})
        calls.send(sid, conversation[:-1])
        kinds["regenerate"] += 1
        edited = [*conversation[:3], {"role": "user", "content": f"session {s}, edited"}]
        calls.send(sid, edited)
        kinds["edit"] += 1
        calls.send(sid, [*conversation[:-4], conversation[-2]])
        kinds["drop_turn"] += 1
    return kinds


def render_branches(client: httpx.Client, url: str, key: str, sessions: int) -> dict[str, int]:
    """Every branch of every session rendered; counted when it equals the branch's log."""
    headers = {"authorization": f"Bearer {key}"}
    found = rendered = equal = 0
    for s in range(sessions):
        base = f"{url}/api/v1/sessions/bench-{s}"
        for branch in client.get(f"{base}/branches", headers=headers).json()["branches"]:
            found += 1
            head = {"branch": branch["head"]}
            answer = client.get(f"{base}/views/default/render", params=head, headers=headers)
            if answer.status_code != 200:
                continue
            rendered += 1
            logged = client.get(f"{base}/messages", params=head, headers=headers).json()
            if answer.json()["messages"] == [m["message"] for m in logged["messages"]]:
                equal += 1
    return {"branches": found, "branches_rendered": rendered, "branches_equal_to_log": equal}


def migration(folder: Path, sessions: int, messages: int) -> dict[str, Any]:
    """A file at the schema before branches, opened by this code."""
    # Imported here: the upstream runs this file too, and starts faster without them.
    from contextfold.core.tokens import COUNT_VERSION, get_counter
    from contextfold.store.sqlite.migrations import MIGRATIONS
    from contextfold.store.sqlite.store import SQLiteStore

    path = folder / "old.db"
    counter = get_counter("o200k_base")
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    names = [name for name, _ in MIGRATIONS]
    for name, statements in MIGRATIONS[: names.index(BEFORE_BRANCHES)]:
        for statement in statements:
            raw.execute(statement)
        raw.execute("INSERT INTO _migrations VALUES (?, 0)", (name,))
    raw.execute("INSERT INTO _count_version VALUES (?)", (COUNT_VERSION,))
    written: dict[str, list[tuple[int, str, int]]] = {}
    raw.execute("BEGIN")
    for s in range(sessions):
        sid = f"old-{s}"
        raw.execute(
            "INSERT INTO sessions (id, encoding, meta, created_at, last_seq, search_number) "
            "VALUES (?, 'o200k_base', '{}', 0, ?, ?)",
            (sid, messages, s + 1),
        )
        rows = []
        for seq in range(1, messages + 1):
            role = "user" if seq % 2 else "assistant"
            message = {"role": role, "content": f"old message {seq} of {sid}"}
            rows.append((seq, json.dumps(message), counter.message(message)))
        raw.executemany(
            "INSERT INTO messages VALUES (?, ?, 'user', ?, ?, NULL, 0)",
            [(sid, seq, text, tokens) for seq, text, tokens in rows],
        )
        written[sid] = rows
    raw.execute("COMMIT")
    raw.close()
    began = time.perf_counter()
    store = SQLiteStore(path)
    took = time.perf_counter() - began
    unchanged = one_branch = 0
    for sid, rows in written.items():
        read = [(m.seq, m.message, m.tokens) for m in store.messages(sid)]
        if read == [(seq, json.loads(text), tokens) for seq, text, tokens in rows]:
            unchanged += len(read)
        heads = {seq for seq, _ in store.links(sid)} - {p for _, p in store.links(sid)}
        one_branch += len(heads) == 1
    store.close()
    return {
        "migrated_messages": sessions * messages,
        "migrated_messages_unchanged": unchanged,
        "migrated_sessions_one_branch": one_branch,
        "migrated_seconds": took,
    }


_TIMING = """
import json, sys, tempfile, time
from pathlib import Path
from contextfold import Memory
from contextfold.memory.cache import PromptCache
n, repeat = int(sys.argv[1]), int(sys.argv[2])
with tempfile.TemporaryDirectory() as tmp:
    memory = Memory(str(Path(tmp) / "t.db"))
    session = memory.session("s", system="You help with code.")
    for start in range(0, n, 500):
        session.extend([{"role": "user" if i % 2 == 0 else "assistant",
                         "content": f"message {i}: the loader reads file_{i}.csv lazily " * 4}
                        for i in range(start, min(n, start + 500))])
    view = session.view("default", preset="offline", budget=8000)
    view.compact()
    def best(fn):
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
        return min(times) * 1000
    def fresh():
        view.binding.prompts = PromptCache()
        view.render()
    appends = []
    for i in range(repeat):
        began = time.perf_counter()
        session.append({"role": "user", "content": f"one more question {i}"})
        appends.append(time.perf_counter() - began)
        session.append({"role": "assistant", "content": f"one more answer {i}"})
    appends.sort()
    print(json.dumps({"render_fresh_ms": best(fresh), "render_cached_ms": best(view.render),
                      "append_p50_ms": appends[len(appends) // 2] * 1000}))
    memory.close()
"""


def single_branch_speed(before: Path, n: int, repeat: int, rounds: int) -> dict[str, float]:
    """The same timing in the code before branches and in this one, alternating."""
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(rounds):
        for label, src in (("before", before), ("after", ROOT / "src")):
            out = subprocess.run(
                [sys.executable, "-c", _TIMING, str(n), str(repeat)],
                env={**os.environ, "PYTHONPATH": str(src)},
                capture_output=True,
                text=True,
                check=True,
            )
            runs[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
    figures: dict[str, float] = {}
    for name in runs["after"][0]:
        low = {label: min(r[name] for r in found) for label, found in runs.items()}
        figures[f"{name}_before"] = low["before"]
        figures[f"{name}_after"] = low["after"]
        figures[f"{name}_ratio"] = low["after"] / low["before"]
    return figures


def main() -> None:
    def options(parser: Any) -> None:
        parser.add_argument("--before", type=Path, help="src folder of the code before branches")

    args = parse_args(__doc__.splitlines()[0], options)
    sessions = 10 if args.quick else 60
    figures: dict[str, Any] = {"sessions": sessions, "turns": TURNS}
    up_port = proxied._free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    upstream = subprocess.Popen(
        [sys.executable, __file__, "--upstream-only", str(up_port)], env=env
    )
    try:
        with tempfile.TemporaryDirectory() as tmp, httpx.Client(timeout=30) as client:
            with proxied._service(tmp, up_port, runner=True) as (port, _):
                url = f"http://127.0.0.1:{port}"
                key = f"cf_{proxied.KEY_ID}_{proxied.SECRET}"
                calls = Calls(client, url, key)
                kinds = round_trips(calls, sessions)
                figures |= {f"round_trips_{kind}": n for kind, n in kinds.items()}
                figures |= {
                    "round_trips_made": calls.made,
                    "round_trips_failed": calls.failed,
                    "prompts_matching": calls.matching,
                }
                figures |= render_branches(client, url, key, sessions)
            figures |= migration(Path(tmp), 20 if args.quick else 100, 1000)
    finally:
        upstream.terminate()
        upstream.wait(10)
    if args.before is not None:
        n, repeat = (2000, 10) if args.quick else (10_000, 30)
        figures |= single_branch_speed(args.before, n, repeat, 2 if args.quick else 3)
    figures["goal_all_round_trips_succeed"] = (
        figures["round_trips_failed"] == 0 and figures["prompts_matching"] == calls.made
    )
    figures["goal_all_branches_rendered"] = (
        figures["branches_rendered"] == figures["branches_equal_to_log"] == figures["branches"]
    )
    figures["goal_all_migrated_unchanged"] = (
        figures["migrated_messages_unchanged"] == figures["migrated_messages"]
    )
    report(figures, args.json)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--upstream-only":
        asyncio.run(_serve_upstream(int(sys.argv[2])))
    else:
        main()
