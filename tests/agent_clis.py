"""Claude Code and Codex CLI, run unmodified and offline against a server on 127.0.0.1.

``make agent-clis`` installs both into ``.npm-tools/`` (git-ignored; the
versions tested are pinned there as lower bounds). Each run gets a fresh
temporary home, so nothing of the user's own setup (keys, settings, history)
is read, and each CLI is configured the way its documentation says a custom
endpoint is:

- Claude Code: ``ANTHROPIC_BASE_URL``, the key in ``ANTHROPIC_API_KEY`` (sent
  as ``x-api-key``) or ``ANTHROPIC_AUTH_TOKEN`` (sent as ``Authorization:
  Bearer``), ``ANTHROPIC_CUSTOM_HEADERS`` for the session
  header, ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` so it sends nothing
  but model calls, run with ``-p`` and ``--allowedTools Bash`` so its shell
  tool runs without a prompt;
- Codex: ``$CODEX_HOME/config.toml`` with a ``[model_providers.cf]`` of
  ``wire_api = "responses"``, the key read from the variable ``env_key``
  names and the session header in ``http_headers``, run as ``codex exec``
  with no sandbox (the work folder is a temporary one).

Both retry a failed call on their own; a run here allows no retry, so a call
the server fails shows as a failed run rather than a hidden second request.
A run with ``resume`` continues the latest conversation kept in its home
(``claude -p --continue``, ``codex exec resume --last``): a second user turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("CONTEXTFOLD_NPM_TOOLS", ROOT / ".npm-tools")) / "node_modules" / ".bin"
Client = Literal["claude_code", "codex"]
CLIENTS: tuple[Client, ...] = ("claude_code", "codex")
PROGRAM: dict[Client, str] = {"claude_code": "claude", "codex": "codex"}
CLAUDE_MODEL = "claude-sonnet-4-6"
CODEX_MODEL = "gpt-5"
CLAUDE_KEY_ENVS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
"""Where Claude Code reads its key: sent as ``x-api-key``, or as ``Authorization: Bearer``."""


def need_cli(client: Client) -> Path:
    """The CLI's executable; skip (fail under CI=true) when it is not installed."""
    path = BIN / PROGRAM[client]
    if path.exists():
        return path
    reason = f"{path} is missing: make agent-clis installs it (make test does)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class Run:
    """How a CLI run ended: its exit code, its output, and the final answer it printed."""

    code: int
    stdout: str
    stderr: str
    answer: str

    def describe(self) -> str:
        return f"exit {self.code}\nstdout: {self.stdout[-3000:]}\nstderr: {self.stderr[-3000:]}"


def run_claude(
    program: Path,
    base_url: str,
    prompt: str,
    work: Path,
    *,
    key: str,
    session: str,
    home: Path,
    resume: bool = False,
    key_env: str = CLAUDE_KEY_ENVS[0],
    timeout: float = 180.0,
) -> Run:
    """``claude -p`` in ``work`` with ``home`` as its home, its key in ``key_env``: its JSON
    result's ``result`` is the answer."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        key_env: key,
        "ANTHROPIC_CUSTOM_HEADERS": f"X-Contextfold-Session: {session}",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    args = [str(program), "-p", prompt, "--output-format", "json", "--model", CLAUDE_MODEL]
    args += ["--allowedTools", "Bash", *(["--continue"] if resume else [])]
    done = _run(args, work, env, timeout)
    answer = ""
    if done.code == 0:
        result: dict[str, Any] = json.loads(done.stdout)
        answer = str(result.get("result", "")) if not result.get("is_error") else ""
    return Run(done.code, done.stdout, done.stderr, answer)


def codex_config(base_url: str, session: str) -> str:
    """``config.toml`` for a Codex whose model calls all go to ``base_url``."""
    return f"""\
model = "{CODEX_MODEL}"
model_provider = "cf"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.cf]
name = "contextfold"
base_url = "{base_url}"
wire_api = "responses"
env_key = "CONTEXTFOLD_API_KEY"
http_headers = {{ "X-Contextfold-Session" = "{session}" }}
request_max_retries = 0
stream_max_retries = 0
"""


def run_codex(
    program: Path,
    base_url: str,
    prompt: str,
    work: Path,
    *,
    key: str,
    session: str,
    home: Path,
    resume: bool = False,
    timeout: float = 180.0,
) -> Run:
    """``codex exec`` in ``work`` with ``home`` as its home: the file
    ``--output-last-message`` writes is the answer."""
    (home / "config.toml").write_text(codex_config(base_url, session))
    last = home / "last-message.txt"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "CONTEXTFOLD_API_KEY": key,
    }
    args = [str(program), "exec", "--skip-git-repo-check", "--color", "never"]
    args += ["--dangerously-bypass-approvals-and-sandbox", "--output-last-message", str(last)]
    args += [*(["resume", "--last"] if resume else []), prompt]
    done = _run(args, work, env, timeout)
    answer = last.read_text().strip() if done.code == 0 and last.exists() else ""
    return Run(done.code, done.stdout, done.stderr, answer)


def run_client(
    client: Client,
    base_url: str,
    prompt: str,
    work: Path,
    *,
    key: str,
    session: str,
    home: Path | None = None,
    resume: bool = False,
    key_env: str = CLAUDE_KEY_ENVS[0],
) -> Run:
    """Run ``client`` once on ``prompt``; ``base_url`` as the CLI wants it (Codex's with ``/v1``);
    ``home``: the CLI's home (a fresh one when None); ``resume``: continue the latest
    conversation kept there; ``key_env``: where Claude Code reads its key (Codex reads it
    from ``env_key``)."""
    program = BIN / PROGRAM[client]
    if home is None:
        home = Path(tempfile.mkdtemp(prefix=f"{client}-home-", dir=work.parent))
    if client == "claude_code":
        return run_claude(
            program,
            base_url,
            prompt,
            work,
            key=key,
            session=session,
            home=home,
            resume=resume,
            key_env=key_env,
        )
    return run_codex(
        program, base_url, prompt, work, key=key, session=session, home=home, resume=resume
    )


def _run(args: list[str], work: Path, env: dict[str, str], timeout: float) -> Run:
    try:
        done = subprocess.run(
            args,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Run(-1, out, f"timed out after {timeout} s", "")
    return Run(done.returncode, done.stdout, done.stderr, "")
