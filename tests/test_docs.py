"""The docs site: every page in the nav, the guides' examples run, the references are whole.

``make test`` builds the site with ``mkdocs build --strict`` (broken links,
missing images, bad API references); these tests check what the build does
not: no page left out of the nav, the examples of the getting-started and
guide pages run as written, and the generated CLI and HTTP references name
every command, flag and route the code has.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUNNABLE_PAGES = ["getting-started.md", "chat-app.md", "agent-tool-loop.md"]
# Blocks that call a hosted model need its key; the others run offline.
NEEDS_A_KEY = re.compile(r"openai|anthropic|answer\.choices", re.I)


def _nav_files(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [path for item in node for path in _nav_files(item)]
    if isinstance(node, dict):
        return [path for value in node.values() for path in _nav_files(value)]
    return []


def _config() -> dict[str, Any]:
    # mkdocs.yml may hold !!python tags in other projects; this one is plain YAML.
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return config


def _hooks() -> ModuleType:
    path = ROOT / "docs_hooks" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference_hooks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    nav = _nav_files(_config()["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == pages
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_no_internal_numbering_reaches_the_reader() -> None:
    texts = {
        p.name: p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *DOCS.rglob("*.md")]
    }
    pattern = re.compile(r"\b(seed|issue|stop) \d+\b|\.\./shared", re.I)
    found = {name: pattern.findall(text) for name, text in texts.items() if pattern.search(text)}
    assert found == {}


@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_the_guide_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = [
        b for b in re.findall(r"```python\n(.*?)```", text, re.S) if not NEEDS_A_KEY.search(b)
    ]
    assert blocks, f"{page} has no example that runs offline"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, page, "exec"), namespace)


def _parser_commands(parser: argparse.ArgumentParser, path: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                flags = [flag for a in sub._actions for flag in a.option_strings if flag != "-h"]
                found[f"{path} {name}"] = [f for f in flags if f != "--help"]
                found.update(_parser_commands(sub, f"{path} {name}"))
    return found


def test_the_cli_reference_names_every_command_and_flag() -> None:
    hooks = _hooks()
    markdown = hooks.cli_markdown()
    commands = _parser_commands(hooks._cli_parser(), "contextfold")
    assert {"contextfold compact", "contextfold serve", "contextfold eval"} <= set(commands)
    for command, flags in commands.items():
        section = markdown.split(f"## `{command}`\n", 1)[1].split("\n## ", 1)[0]
        for flag in flags:
            assert re.search(rf"`{re.escape(flag)}[ `]", section), (command, flag)


def test_the_http_reference_names_every_route_and_schema() -> None:
    hooks = _hooks()
    markdown = hooks.http_markdown()
    spec = hooks._openapi()
    for path, item in spec["paths"].items():
        for method in item:
            if method in hooks._METHODS:
                assert f"### `{method.upper()} {path}`" in markdown
    for name in spec["components"]["schemas"]:
        assert f"### {name}\n" in markdown


def test_the_presets_reference_names_every_preset_and_strategy() -> None:
    from contextfold import get_preset, preset_names

    markdown = _hooks().presets_markdown()
    for name in preset_names():
        row = next(line for line in markdown.splitlines() if line.startswith(f"| `{name}` |"))
        for strategy in get_preset(name).strategies:
            assert f"`{type(strategy).__name__}(" in row, (name, strategy)


def test_the_configuration_reference_names_every_setting() -> None:
    hooks = _hooks()
    markdown = hooks.config_markdown()
    commands = _parser_commands(hooks._cli_parser(), "contextfold")
    for command in hooks.CONFIGURED_COMMANDS:
        section = markdown.split(f"## `contextfold {command}`", 1)[1].split("\n## ", 1)[0]
        for flag in commands[f"contextfold {command}"]:
            variable = "CONTEXTFOLD_" + flag[2:].upper().replace("-", "_")
            assert f"| `{flag}` | `{variable}` |" in section, (command, flag)


def test_the_references_replace_their_marks() -> None:
    hooks = _hooks()
    for page, mark in [
        ("reference/cli.md", hooks.CLI_MARK),
        ("reference/http.md", hooks.HTTP_MARK),
        ("reference/presets.md", hooks.PRESETS_MARK),
        ("reference/configuration.md", hooks.CONFIG_MARK),
    ]:
        text = (DOCS / page).read_text(encoding="utf-8")
        assert mark in text
        assert mark not in hooks.on_page_markdown(text, None, None, None)
