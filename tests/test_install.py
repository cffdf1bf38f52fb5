"""The package as a user installs it: the wheel, in fresh virtualenvs, through its console script.

The wheel is built once; it goes into a virtualenv of its own with the core
dependencies alone, and into another with the ``server`` extra. In each, every
subcommand (read from the installed parser, so a new one is covered without
editing this file) answers ``--help``, the demo and the shipped session run,
and each command whose extra is missing exits 2 with one line naming it.
The dependencies come from the package index (a warm pip cache makes this fast);
when it cannot be reached these tests fail, they never skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["version"]
# Run inside the installed venv: the paths of every subcommand, from the parser itself.
LIST_COMMANDS = """
import argparse, json
from contextfold.cli import _parser

def walk(parser, path):
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, [*path, name])

print(json.dumps(list(walk(_parser(), []))))
"""
DEMO_PATH = (
    "import importlib.resources as r; print(r.files('contextfold') / 'data/demo_session.json')"
)


@dataclass(frozen=True)
class Install:
    """One fresh virtualenv holding the wheel (and the extras named)."""

    root: Path
    work: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The console script, as a user's shell runs it (no PYTHONPATH, a cwd of its own)."""
        return subprocess.run(
            [str(self.root / "bin" / "contextfold"), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.work,
            env=_clean_env(),
            check=False,
        )

    def python_out(self, code: str) -> str:
        done = subprocess.run(
            [str(self.python), "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.work,
            env=_clean_env(),
            check=True,
        )
        return done.stdout.strip()

    def commands(self) -> list[list[str]]:
        paths: list[list[str]] = json.loads(self.python_out(LIST_COMMANDS))
        return paths

    def demo_session(self) -> Path:
        path = Path(self.python_out(DEMO_PATH))
        assert path.is_relative_to(self.root), path  # the installed copy, not the source tree
        return path


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["COLUMNS"] = "120"
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the project so the source tree gets no build/."""
    src = tmp_path_factory.mktemp("project")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("contextfold-*.whl")
    return built


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> dict[str, Install]:
    """The core and the core + server virtualenvs, installed side by side."""
    made: dict[str, Install] = {}
    running = []
    for kind, target in (("core", str(wheel)), ("server", f"{wheel}[server]")):
        root = tmp_path_factory.mktemp(f"venv-{kind}")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
        pip = [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python")]
        argv = [*pip, "install", "-q", "--disable-pip-version-check", target]
        running.append(subprocess.Popen(argv, stderr=subprocess.PIPE, text=True))
        made[kind] = Install(root, tmp_path_factory.mktemp(f"work-{kind}"))
    for proc in running:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    return made


@pytest.fixture(scope="module")
def core(installs: dict[str, Install]) -> Install:
    return installs["core"]


@pytest.fixture(scope="module")
def server(installs: dict[str, Install]) -> Install:
    return installs["server"]


@pytest.fixture(params=["core", "server"])
def install(request: pytest.FixtureRequest) -> Install:
    found: Install = request.getfixturevalue(request.param)
    return found


def test_the_core_install_holds_no_extra(core: Install) -> None:
    for module in ("fastapi", "uvicorn", "redis", "celery", "kombu", "psycopg", "matplotlib"):
        found = core.python_out(f"import importlib.util as u; print(u.find_spec({module!r}))")
        assert found == "None", module


def test_every_command_answers_help(install: Install) -> None:
    commands = install.commands()
    names = {" ".join(path) for path in commands}
    assert {"", "compact", "demo", "presets", "eval", "serve", "worker", "keys list"} <= names
    for path in commands:
        done = install.run(*path, "--help")
        assert done.returncode == 0, (path, done.stderr)
        assert done.stdout.startswith("usage: contextfold"), path
        assert done.stderr == "", path


def test_version_is_the_package_metadata(install: Install) -> None:
    done = install.run("--version")
    assert (done.returncode, done.stdout) == (0, f"contextfold {VERSION}\n")


def test_demo_compact_and_eval_run_on_the_shipped_session(install: Install) -> None:
    demo = install.run("demo")
    assert demo.returncode == 0, demo.stderr
    assert "Rendered prompt (abridged)" in demo.stdout
    session = install.demo_session()
    compact = install.run("compact", str(session), "--budget", "8000", "--json")
    assert compact.returncode == 0, compact.stderr
    result = json.loads(compact.stdout)
    assert result["tokens_after"] <= 8000 < result["tokens_before"]
    assert result["folds"]
    evaluated = install.run("eval", str(session), "--budgets", "10%", "--samples", "2", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    rows = json.loads(evaluated.stdout)["results"]
    assert {row["preset"] for row in rows} == {"offline", "keep-recent"}


MISSING = {
    "core": [
        (["serve"], "'contextfold serve'", "server"),
        (["worker", "--database", "x.db", "--broker", "redis://127.0.0.1:1/0"], None, "workers"),
        (["eval", "{demo}", "--report", "{work}/report"], "'contextfold eval --report'", "eval"),
        (["keys", "list", "--database", "postgresql://127.0.0.1/x"], None, "postgres"),
        (["mcp", "--store", "x.db"], "'contextfold mcp'", "mcp"),
    ],
    "server": [
        (["worker", "--database", "x.db", "--broker", "redis://127.0.0.1:1/0"], None, "workers"),
        (["eval", "{demo}", "--report", "{work}/report"], "'contextfold eval --report'", "eval"),
        (
            ["serve", "--no-auth", "--port", "0", "--workers", "redis://127.0.0.1:1/0"],
            None,
            "workers",
        ),
        (["mcp", "--http", "--store", "x.db"], "'contextfold mcp'", "mcp"),
    ],
}


@pytest.mark.parametrize("kind", ["core", "server"])
def test_a_missing_extra_is_one_line_naming_it(kind: str, request: pytest.FixtureRequest) -> None:
    install: Install = request.getfixturevalue(kind)
    demo = install.demo_session()
    for argv, what, extra in MISSING[kind]:
        args = [a.format(demo=demo, work=install.work) for a in argv]
        done = install.run(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
        hint = f"needs the {extra} extra: pip install 'contextfold[{extra}]'\n"
        assert done.stderr.startswith("contextfold: error: ") and done.stderr.endswith(hint)
        if what is not None:
            assert done.stderr == f"contextfold: error: {what} {hint}"
    assert not (install.work / "report").exists()


def test_serve_starts_answers_and_stops(server: Install) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = server.root / "bin" / "contextfold"
    argv = [str(script), "serve", "--no-auth", "--port", str(port), "--database", "memory://"]
    proc = subprocess.Popen(
        argv,
        cwd=server.work,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = _wait_for(f"http://127.0.0.1:{port}/healthz", proc, deadline_s=60)
        assert json.loads(body)["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"on http://127.0.0.1:{port}" in out


def _wait_for(url: str, proc: subprocess.Popen[str], *, deadline_s: float) -> str:
    until = time.monotonic() + deadline_s
    while True:
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"serve exited {proc.returncode}: {err}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                text: str = answer.read().decode()
                return text
        except OSError:
            if time.monotonic() > until:
                raise
            time.sleep(0.1)
