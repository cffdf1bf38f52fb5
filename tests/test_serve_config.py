"""``serve`` and ``worker`` configured from flags, the environment and a TOML file.

One rule for every flag: ``CONTEXTFOLD_`` + its name, or its name as a key of
the command's table in ``--config``; a flag beats the environment, which beats
the file, which beats the default. The served cases run ``contextfold serve``
as a subprocess, as a user starts it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from fake_providers import FakeProvider, openai_reply
from server_harness import free_port

from contextfold.cli import _parser, main
from contextfold.options import resolve

WAIT_S = 30.0


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = _parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    raise AssertionError("no subcommands")


def _flags(command: str) -> list[argparse.Action]:
    return [
        a
        for a in _subparser(command)._actions
        if a.option_strings and a.dest not in ("help", "config")
    ]


def _sample(action: argparse.Action) -> tuple[str, Any, Any]:
    """A value for the flag as the environment writes it, as TOML does, and as parsed."""
    if action.nargs == 0:
        return "true", True, True
    if isinstance(action, argparse._AppendAction):
        return "a, b", ["a", "b"], ["a", "b"]
    if action.choices:
        choice = sorted(action.choices)[-1]
        return choice, choice, choice
    if action.type is int:
        return "7", 7, 7
    if action.type is float:
        return "2.5", 2.5, 2.5
    return "some-text", "some-text", "some-text"


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_every_flag_comes_from_the_environment_and_from_the_file(
    command: str, tmp_path: Path
) -> None:
    flags = _flags(command)
    assert len(flags) >= 10
    for action in flags:
        name = action.option_strings[0][2:]
        variable = "CONTEXTFOLD_" + name.upper().replace("-", "_")
        env_text, toml_value, parsed = _sample(action)
        required = {"CONTEXTFOLD_DATABASE": "d", "CONTEXTFOLD_BROKER": "b"}
        args = _parser().parse_args([command])
        resolve(args, {**required, variable: env_text})
        assert getattr(args, action.dest) == parsed, variable
        path = tmp_path / f"{name}.toml"
        value = toml_value if not isinstance(toml_value, str) else f'"{toml_value}"'
        if isinstance(toml_value, bool):
            value = "true"
        elif isinstance(toml_value, list):
            value = '["a", "b"]'
        path.write_text(f"[{command}]\n{name} = {value}\n")
        args = _parser().parse_args([command, "--config", str(path)])
        resolve(args, {k: v for k, v in required.items() if k != variable})
        assert getattr(args, action.dest) == parsed, f"{name} in {path}"


def test_a_flag_beats_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cf.toml"
    path.write_text('[serve]\nport = 1111\nhost = "::1"\nqueue = "from-file"\nbudget = 300\n')
    args = _parser().parse_args(["serve", "--config", str(path), "--port", "3333"])
    resolve(args, {"CONTEXTFOLD_PORT": "2222", "CONTEXTFOLD_HOST": "localhost"})
    assert (args.port, args.host, args.queue, args.budget) == (3333, "localhost", "from-file", 300)
    assert args.database == "contextfold.db" and args.no_auth is False  # defaults
    args = _parser().parse_args(["serve"])
    resolve(args, {"CONTEXTFOLD_CONFIG": str(path)})
    assert args.port == 1111


@pytest.mark.parametrize(
    ("env", "toml", "said"),
    [
        ({"CONTEXTFOLD_PORT": "eighty"}, None, "CONTEXTFOLD_PORT must be an integer"),
        ({"CONTEXTFOLD_NO_AUTH": "maybe"}, None, "CONTEXTFOLD_NO_AUTH must be true or false"),
        ({}, "[serve]\nprot = 80\n", "[serve]: unknown key 'prot'"),
        ({}, '[serve]\nport = "80"\n', "[serve] port must be an integer"),
        ({}, "[serve]\nno-auth = 1\n", "[serve] no-auth must be true or false"),
        ({}, "[serv]\nport = 80\n", "unknown table or key 'serv'"),
        ({}, "[serve\n", "is not TOML"),
        ({}, "[model_windows]\nmine = 0\n", "[model_windows] mine: a window is a positive"),
        ({"CONTEXTFOLD_PORT": "70000"}, None, "port must be in 0..65535, not 70000 (from "),
        ({}, "[serve]\nupstream = 'http://h/v1'\n", "upstream must be 'openai-compatible:URL'"),
        ({"CONTEXTFOLD_WORKERS": "amqp://u:pw@h"}, None, "not 'amqp://u:***@h' (from"),
        ({"CONTEXTFOLD_MODEL": "nope:x"}, None, "model is provider:name with a provider of"),
        ({}, '[serve]\npreset = "nope"\n', "unknown preset 'nope'"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_key_and_where_it_came_from(
    env: dict[str, str],
    toml: str | None,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = ["serve", "--database", "memory://"]
    if toml is not None:
        path = tmp_path / "cf.toml"
        path.write_text(toml)
        argv += ["--config", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1, err
    if toml is not None and "TOML" not in said:
        assert str(tmp_path / "cf.toml") in err.replace("\n", "")
    elif env:
        assert next(iter(env)) in err


def test_a_missing_config_file_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--config", "/nonexistent/cf.toml"]) == 2
    assert "cannot read /nonexistent/cf.toml" in capsys.readouterr().err


def test_the_worker_names_a_required_flag_and_its_other_sources(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("CONTEXTFOLD_DATABASE", raising=False)
    assert main(["worker", "--broker", "redis://127.0.0.1:6379/0"]) == 2
    err = capsys.readouterr().err
    assert "--database is required (or CONTEXTFOLD_DATABASE, or database in the [worker]" in err
    path = tmp_path / "cf.toml"
    path.write_text('[worker]\ndatabase = "memory://"\nbroker = "redis://h/0"\nbackoff = 0\n')
    assert main(["worker", "--config", str(path)]) == 2
    assert f"backoff must be positive (from {path} [worker] backoff)" in capsys.readouterr().err


def test_serve_help_says_where_settings_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "CONTEXTFOLD_SOME_FLAG" in text and "--config PATH" in text
    assert "A flag given wins over the environment, the environment over the file" in text


class Output:
    """What a subprocess printed (stdout and stderr), readable while it runs and after."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.final: str | None = None

    @property
    def text(self) -> str:
        return self.final if self.final is not None else printed(self.file)


@contextmanager
def serving(argv: list[str], env: dict[str, str], port: int) -> Iterator[Output]:
    """``contextfold serve`` in a subprocess, until it answers on ``port``; stopped after."""
    with tempfile.TemporaryFile() as file:
        output = Output(file)
        proc = subprocess.Popen(
            [sys.executable, "-m", "contextfold.cli", "serve", *argv],
            stdout=file,
            stderr=file,
            env={**os.environ, **env},
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while not _answers(port):
                assert proc.poll() is None, output.text
                assert time.monotonic() < deadline, output.text
                time.sleep(0.1)
            yield output
        finally:
            proc.terminate()
            proc.wait(30)
            output.final = printed(file)


def printed(output: IO[bytes]) -> str:
    output.seek(0)
    return output.read().decode(errors="replace")


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_serve_takes_each_setting_from_the_strongest_source(tmp_path: Path) -> None:
    """File: port (beaten by the environment), no-auth, a CORS origin, the upstream and two
    models' windows (one kept, one beaten by --model-window). Environment: port, database
    (beaten by the flag)."""
    port, file_port = free_port(), free_port()
    path = tmp_path / "cf.toml"
    upstream = FakeProvider("openai")
    path.write_text(
        f'[serve]\nport = {file_port}\nno-auth = true\ncors-origin = ["http://app.test"]\n'
        f'database = "file.db"\nupstream = "openai-compatible:{upstream.url}"\n'
        '[model_windows]\n"my-local" = 32768\n"their-local" = 16384\n'
    )
    env = {"CONTEXTFOLD_PORT": str(port), "CONTEXTFOLD_DATABASE": str(tmp_path / "env.db")}
    argv = ["--config", str(path), "--database", str(tmp_path / "flag.db")]
    argv += ["--model-window", "their-local=65536"]
    with upstream, serving(argv, env, port) as output:
        upstream.add(openai_reply("noted"), openai_reply("noted"))
        for model, budget in (("my-local", 32_768 - 8192), ("their-local", 65_536 - 16_384)):
            body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
            answer = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json=body,
                headers={"X-Contextfold-Session": model},
            )
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-contextfold-budget"] == str(budget)
            assert answer.headers["x-contextfold-budget-source"] == "config"
        answer = httpx.get(
            f"http://127.0.0.1:{port}/api/v1/sessions", headers={"Origin": "http://app.test"}
        )
        assert answer.status_code == 200  # no key needed: no-auth came from the file
        assert answer.headers["access-control-allow-origin"] == "http://app.test"
        assert f"serving {tmp_path / 'flag.db'} on http://127.0.0.1:{port}" in output.text
    assert (tmp_path / "flag.db").exists() and not (tmp_path / "env.db").exists()


def test_serve_demo_still_seeds_the_demo_session(tmp_path: Path) -> None:
    port = free_port()
    env = {"CONTEXTFOLD_DATABASE": str(tmp_path / "demo.db"), "CONTEXTFOLD_DEMO": "yes"}
    with serving(["--port", str(port)], env, port) as output:
        answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/sessions/demo/views/default")
        assert answer.status_code == 200 and answer.json()["config"]["preset"] == "offline"
    assert f"open http://127.0.0.1:{port}/sessions/demo" in output.text
