"""The README's examples run as written, and it stays an introduction.

The library examples run in-process on a SQLite file. The proxy example runs as
a user would: the README's own ``contextfold serve`` line as a subprocess, with
a fake OpenAI-compatible server on 127.0.0.1 as its upstream, and the README's
client code against it through the real OpenAI SDK.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fake_openai import openai_reply
from fake_providers import FakeProvider
from server_harness import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, re.S)
LIBRARY_BLOCKS = [b for b in BLOCKS if "from contextfold import" in b]
PROXY_BLOCKS = [b for b in BLOCKS if "base_url=" in b]
SERVE_LINE = re.compile(r"^contextfold serve .*--upstream (\S+)$", re.M)
PUBLIC_UPSTREAM = "https://api.openai.com/v1"


def test_the_first_example_is_three_lines_after_its_import() -> None:
    lines = [line for line in LIBRARY_BLOCKS[0].splitlines() if line.strip()]
    assert lines[0].startswith("from contextfold import")
    assert len(lines) - 1 <= 3, LIBRARY_BLOCKS[0]


def test_the_readme_introduces_in_one_screenful() -> None:
    lines = TEXT.splitlines()
    assert 150 <= len(lines) <= 250, len(lines)
    assert len(TEXT) < 20_000, len(TEXT)
    opening = "\n".join(lines[:40])
    assert "make demo" in opening and "make test" in opening


def test_every_make_target_it_names_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    named = set(re.findall(r"`?make ([a-z][\w-]*)", TEXT))
    assert named and named <= targets, named - targets


def test_every_relative_link_resolves() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", TEXT)
    local = [link for link in links if "://" not in link]
    assert local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []


@pytest.mark.parametrize("block", LIBRARY_BLOCKS)
def test_readme_example_runs(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    prompt = namespace["prompt"]
    assert isinstance(prompt, list) and prompt[0]["role"] == "system"
    assert prompt[-1]["role"] == "user"
    assert list(tmp_path.glob("*.db"))


def _wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"contextfold serve exited with {server.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("contextfold serve did not answer /healthz within 60 s")


def test_the_proxy_example_runs_against_a_real_server(tmp_path: Path) -> None:
    assert len(PROXY_BLOCKS) == 1
    found = SERVE_LINE.search(TEXT)
    assert found and found.group(1) == f"openai-compatible:{PUBLIC_UPSTREAM}"
    port = free_port()
    with FakeProvider("openai") as upstream:
        upstream.add(openai_reply("Hello from upstream"))
        args = shlex.split(found.group(0).replace(PUBLIC_UPSTREAM, upstream.url))
        command = [str(Path(sys.executable).with_name("contextfold")), *args[1:]]
        command += ["--port", str(port), "--database", str(tmp_path / "proxy.db")]
        env = {**os.environ, "CONTEXTFOLD_UPSTREAM_KEY": "sk-readme"}
        server = subprocess.Popen(command, env=env, cwd=tmp_path)
        try:
            _wait_healthy(f"http://127.0.0.1:{port}", server)
            namespace: dict[str, object] = {}
            code = PROXY_BLOCKS[0].replace("127.0.0.1:8765", f"127.0.0.1:{port}")
            exec(compile(code, "README.md", "exec"), namespace)
        finally:
            server.terminate()
            server.wait(timeout=30)
    answer = namespace["answer"]
    assert answer.choices[0].message.content == "Hello from upstream"  # type: ignore[attr-defined]
    (sent,) = upstream.requests
    assert sent.headers["authorization"] == "Bearer sk-readme"
    assert sent.body["messages"][-1] == {"role": "user", "content": "Hello!"}
