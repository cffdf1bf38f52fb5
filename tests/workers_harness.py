"""Redis, fresh queues on it, and ``contextfold worker`` processes for the worker tests.

``CONTEXTFOLD_TEST_REDIS`` names the broker (default: the local server, db 0).
A test that needs it and finds it down fails under ``CI=true`` and is skipped
otherwise, in ``require_redis`` alone. Each test takes a queue name no other
test uses (``fresh_queue``), so tests and leftovers never share jobs.

Workers are real processes (the CLI, in a process group of their own, so a
test can SIGKILL a worker whole or only the pool process running a job).
``private_redis`` runs a Redis server of the test's own on a free port, for
tests that stop and restart the broker.

What the fault tests check after every fault lives here too: ``Events``
collects what the workers publish, ``fold_problems`` says what is wrong with a
view's stored fold set (overlaps, ranges off the log, a tool call split from
its result), and ``FoldWatcher`` looks at fold sets and renders the whole time
a test runs, so a partial commit would be seen, not only the final state.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contextfold.core.events import Event

REDIS = os.environ.get("CONTEXTFOLD_TEST_REDIS", "redis://127.0.0.1:6379/0")
PLUGIN = "contextfold.testing.models"


def require_redis(url: str = REDIS) -> None:
    """Fail (under CI=true) or skip the test when the broker does not answer."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        reason = f"Redis at {url} is down: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@contextmanager
def fresh_queue(url: str = REDIS) -> Iterator[str]:
    """A queue name no test used; its jobs and keys are deleted afterwards."""
    from contextfold.workers.queue import WorkQueue

    name = f"cftest-{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        queue = WorkQueue(url, name)
        with suppress(Exception):
            queue.clear()
        queue.close()


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return bool(predicate())
        time.sleep(interval)


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Celery's pool processes of a prefork worker)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            found.extend(int(p) for p in text.split())
    except OSError:
        pass
    return found


@dataclass
class WorkerProcess:
    """One ``contextfold worker`` process (and its pool), its output in ``log``."""

    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def pool(self) -> list[int]:
        return children(self.proc.pid)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def owners(self, events: list[Event]) -> set[str]:
        """The worker owner strings (``host:pid:rand``) of this worker's pool in ``events``."""
        pids = {self.pid, *self.pool()}
        return {e.data["worker"] for e in events if owner_pid(e.data["worker"]) in pids}

    def pause(self) -> None:
        """SIGSTOP the worker whole (a stalled machine): it runs, renews and fetches nothing."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the worker whole: its main process and its pool."""
        with_pool = [self.proc.pid, *self.pool()]
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in with_pool:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> None:
        """A warm shutdown (SIGTERM), then SIGKILL if it does not end in ``timeout``."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def owner_pid(owner: str) -> int:
    """The pid in a worker owner string ``host:pid:rand``."""
    return int(owner.split(":")[-2])


@contextmanager
def worker(
    database: str,
    queue: str,
    *,
    broker: str = REDIS,
    concurrency: int = 1,
    pool: str = "prefork",
    lease_ttl: float = 3.0,
    visibility_timeout: float = 600.0,
    max_failures: int = 5,
    backoff: float = 1.0,
    plugins: tuple[str, ...] = (PLUGIN,),
    loglevel: str = "info",
    ready_timeout: float = 60.0,
) -> Iterator[WorkerProcess]:
    """A running worker (ready to take jobs); stopped, or killed, on the way out."""
    folder = Path(tempfile.mkdtemp(prefix="cf-worker-"))
    log = folder / "worker.log"
    argv = [
        sys.executable, "-m", "contextfold.cli", "worker",
        "--database", database, "--broker", broker, "--queue", queue,
        "--concurrency", str(concurrency), "--pool", pool,
        "--lease-ttl", str(lease_ttl), "--visibility-timeout", str(visibility_timeout),
        "--max-failures", str(max_failures), "--backoff", str(backoff),
        "--loglevel", loglevel,
    ]  # fmt: skip
    for plugin in plugins:
        argv += ["--plugin", plugin]
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    started = WorkerProcess(proc, log)
    try:
        if not wait_for(
            lambda: " ready." in started.output() or not started.alive(), ready_timeout
        ):
            raise RuntimeError(
                f"worker not ready in {ready_timeout} s:\n{started.output()[-3000:]}"
            )
        if not started.alive():
            raise RuntimeError(f"worker exited:\n{started.output()[-3000:]}")
        yield started
    finally:
        started.stop()
        shutil.rmtree(folder, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivateRedis:
    """A Redis server of the test's own, which it may stop and start again on one port."""

    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        if not wait_for(lambda: _pings(client), 10):
            raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


def _pings(client: object) -> bool:
    import redis

    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except redis.RedisError:
        return False


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    """A fresh ``redis-server`` on a free port (the Debian package's binary)."""
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    server = PrivateRedis(free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def workers(
    database: str, queue: str, concurrencies: tuple[int, ...], **options: Any
) -> Iterator[list[WorkerProcess]]:
    """Several workers on one queue, stopped together (a warm shutdown takes seconds each)."""
    with ExitStack() as stack:
        started = [
            stack.enter_context(worker(database, queue, concurrency=n, **options))
            for n in concurrencies
        ]
        try:
            yield started
        finally:
            for each in started:
                if each.alive():
                    each.proc.send_signal(signal.SIGTERM)


class Events:
    """The events a runner hears, kept in order (an ``on_event`` callback)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Event] = []

    def __call__(self, event: Event) -> None:
        with self._lock:
            self._items.append(event)

    def of(
        self, kind: str | None = None, view: str | None = None, *, session: str | None = None
    ) -> list[Event]:
        with self._lock:
            items = list(self._items)
        return [
            e
            for e in items
            if (kind is None or e.kind == kind)
            and (view is None or e.view == view)
            and (session is None or e.session == session)
        ]


def turn(i: int) -> list[dict[str, Any]]:
    """One exchange of four messages in three units: a question, a tool call with its
    result (one unit, never folded apart), and an answer."""
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"item": i})},
    }
    return [
        {"role": "user", "content": f"Look up item {i} and remember code word alpha{i}."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"item {i}: {i * 7} units"},
        {"role": "assistant", "content": f"Item {i} holds {i * 7} units; noted alpha{i}."},
    ]


def fold_problems(store: Any, session_id: str, view: str) -> list[str]:
    """What is wrong with the view's stored folds: a range off the log, two folds that
    overlap, a tool call folded apart from its result. Empty when the set is sound."""
    last = store.head(session_id, view).last_seq
    folds = sorted(store.folds(session_id, view), key=lambda f: (f.start, f.end))
    problems = [
        f"fold {f.start}..{f.end} lies off the log 1..{last}" for f in folds if f.end > last
    ]
    placed = [f for f in folds if f.placement == "in_place"]
    problems += [
        f"folds {a.start}..{a.end} and {b.start}..{b.end} overlap"
        for a, b in itertools.pairwise(placed)
        if b.start <= a.end
    ]
    callers: dict[str, int] = {}
    for logged in store.messages(session_id, 1):
        message = logged.message
        for call in message.get("tool_calls") or ():
            callers[call["id"]] = logged.seq
        caller = callers.get(message.get("tool_call_id") or "")
        if message["role"] != "tool" or caller is None:
            continue
        problems += [
            f"fold {f.start}..{f.end} splits call {caller} from its result {logged.seq}"
            for f in folds
            if (f.start <= caller <= f.end) != (f.start <= logged.seq <= f.end)
        ]
    return problems


class FoldWatcher:
    """Reads the watched views' fold sets and renders them until stopped, on a store of its
    own: every fold set seen must be sound, one fold set per fold-set version (so each is
    what one commit made, not half of one), and every render must work."""

    def __init__(self, database: str, views: list[tuple[str, str]]) -> None:
        from contextfold.memory.session import Memory

        self.memory = Memory(database)
        self.views = views
        self.problems: list[str] = []
        self.seen: dict[tuple[str, str, int], frozenset[str]] = {}
        self.looks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="fold-watcher", daemon=True)

    def __enter__(self) -> FoldWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.memory.close()

    def _watch(self) -> None:
        store = self.memory.store
        handles = {(s, v): self.memory.session(s).view(v) for s, v in self.views}
        while not self._stop.is_set():
            for (session_id, view), handle in handles.items():
                try:
                    self._look(store, session_id, view)
                    handle.render()
                except Exception as exc:  # the watcher reports, the test asserts
                    self.problems.append(f"{session_id}/{view}: {type(exc).__name__}: {exc}")
            self.looks += 1

    def _look(self, store: Any, session_id: str, view: str) -> None:
        version = store.head(session_id, view).fold_version
        folds = store.folds(session_id, view)
        if store.head(session_id, view).fold_version != version:
            return  # a commit came in between: look again
        ids = frozenset(f.id for f in folds)
        earlier = self.seen.setdefault((session_id, view, version), ids)
        if earlier != ids:
            self.problems.append(f"{session_id}/{view}: two fold sets at version {version}")
        self.problems += [
            f"{session_id}/{view}: {p}" for p in fold_problems(store, session_id, view)
        ]


def log_problems(store: Any, session_id: str, appended: list[dict[str, Any]]) -> list[str]:
    """How the stored log differs from what was appended after its system prompt."""
    logged = [m.message for m in store.messages(session_id, 1)][1:]
    if len(logged) != len(appended):
        return [f"{len(logged)} messages logged, {len(appended)} appended"]
    return [
        f"message {i + 2} changed: {got!r} != {sent!r}"
        for i, (got, sent) in enumerate(zip(logged, appended, strict=True))
        if (got["role"], got.get("content"), got.get("tool_call_id"))
        != (sent["role"], sent.get("content"), sent.get("tool_call_id"))
    ]
