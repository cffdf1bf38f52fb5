"""No password or key in what ``serve`` and ``worker`` print: banners, logs, errors.

Real commands in subprocesses, over the local PostgreSQL (trust auth, so any
password is accepted) with a password in every URL they are given.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import httpx
import pytest
from pg import SERVER, fresh_schema, require_postgres, url
from server_harness import free_port
from test_serve_config import WAIT_S, printed, serving
from workers_harness import REDIS, fresh_queue, require_redis

from contextfold.redact import redact

PASSWORD = "s3cret"
KEY = "sk-upstream-k3y"


def with_password(store_url: str) -> str:
    assert "://postgres@" in store_url, store_url
    return store_url.replace("://postgres@", f"://postgres:{PASSWORD}@")


@pytest.mark.parametrize(
    ("shown", "masked"),
    [
        ("postgresql://user:pw@host/db", "postgresql://user:***@host/db"),
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("at http://u:p@127.0.0.1:9/v1: refused", "at http://u:***@127.0.0.1:9/v1: refused"),
        ("postgresql://h/db?sslmode=off&password=pw", "postgresql://h/db?sslmode=off&password=***"),
        ("postgresql://user@host/db and memory://", "postgresql://user@host/db and memory://"),
    ],
)
def test_redact_masks_the_password_of_each_url(shown: str, masked: str) -> None:
    assert redact(shown) == masked


def test_serve_prints_no_password_and_no_key() -> None:
    require_postgres()
    dead = free_port()  # nothing listens there: the proxy's upstream fails
    port = free_port()
    with fresh_schema() as schema:
        argv = [
            "--no-auth", "--port", str(port), "--database", with_password(url(schema)),
            "--upstream", f"openai-compatible:http://proxy:{PASSWORD}@127.0.0.1:{dead}/v1",
            "--model", f"openai-compatible:http://sum:{PASSWORD}@127.0.0.1:{dead}/v1#m",
        ]  # fmt: skip
        env = {"CONTEXTFOLD_UPSTREAM_KEY": KEY}
        with serving(argv, env, port) as output:
            base = f"http://127.0.0.1:{port}"
            assert httpx.get(f"{base}/readyz").status_code == 200
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
            failed = httpx.post(
                f"{base}/v1/chat/completions", json=body, headers={"X-Contextfold-Session": "s"}
            )
            assert failed.status_code == 502 and "unreachable" in failed.text
            assert PASSWORD not in failed.text and KEY not in failed.text
    text = output.text
    assert "serving postgresql://postgres:***@127.0.0.1:5432/test" in text, text
    assert f"to openai-compatible:http://proxy:***@127.0.0.1:{dead}/v1" in text, text
    assert PASSWORD not in text and KEY not in text, text


def test_a_store_that_does_not_answer_is_named_without_its_password() -> None:
    dead = free_port()
    store = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{dead}/test?timeout=2"
    done = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "serve", "--database", store],
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
    )
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert str(dead) in text and PASSWORD not in text, text


def test_worker_prints_no_password() -> None:
    require_postgres()
    require_redis()
    with fresh_schema() as schema, fresh_queue() as queue, tempfile.TemporaryFile() as output:
        env = {**os.environ, "CONTEXTFOLD_DATABASE": with_password(url(schema))}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "contextfold.cli",
                "worker",
                "--broker",
                REDIS,
                "--queue",
                queue,
            ],
            stdout=output,
            stderr=output,
            env=env,
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while "contextfold worker:" not in printed(output):
                assert proc.poll() is None and time.monotonic() < deadline, printed(output)
                time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(30)
        text = printed(output)
    assert f"contextfold worker: {SERVER.replace('@', ':***@', 1)}" in text, text
    assert PASSWORD not in text, text
