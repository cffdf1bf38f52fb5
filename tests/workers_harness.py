"""Redis, fresh queues on it, and ``contextfold worker`` processes for the worker tests.

``CONTEXTFOLD_TEST_REDIS`` names the broker (default: the local server, db 0).
A test that needs it and finds it down fails under ``CI=true`` and is skipped
otherwise, in ``require_redis`` alone. Each test takes a queue name no other
test uses (``fresh_queue``), so tests and leftovers never share jobs.

Workers are real processes (the CLI, in a process group of their own, so a
test can SIGKILL a worker whole or only the pool process running a job).
``private_redis`` runs a Redis server of the test's own on a free port, for
tests that stop and restart the broker.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

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
