"""MkDocs hooks: the CLI and HTTP reference pages, generated at build time.

A page holding ``<!-- cli-reference -->`` gets every command of the argparse
parser in ``contextfold.cli``; a page holding ``<!-- http-reference -->`` gets
every operation of the FastAPI app's OpenAPI schema; ``<!-- config-reference -->``
gets every setting of ``serve`` and ``worker`` with its environment variable and
TOML key, read from the same parser through ``contextfold.options``. Both are read from the
code the site is built with, so a flag or route someone adds appears without a
docs edit, and a parser or app that no longer builds fails the build.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import warnings
from collections.abc import Iterator
from typing import Any

CLI_MARK = "<!-- cli-reference -->"
HTTP_MARK = "<!-- http-reference -->"
PRESETS_MARK = "<!-- presets-reference -->"
CONFIG_MARK = "<!-- config-reference -->"
CONFIGURED_COMMANDS = ("serve", "worker")
_PARSER_FACTORIES = ("build_parser", "parser", "_parser")
_METHODS = ("get", "post", "put", "patch", "delete")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the reference marks with the generated Markdown."""
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_markdown())
    if HTTP_MARK in markdown:
        markdown = markdown.replace(HTTP_MARK, http_markdown())
    if PRESETS_MARK in markdown:
        markdown = markdown.replace(PRESETS_MARK, presets_markdown())
    if CONFIG_MARK in markdown:
        markdown = markdown.replace(CONFIG_MARK, config_markdown())
    return markdown


def _cli_parser() -> argparse.ArgumentParser:
    cli = importlib.import_module("contextfold.cli")
    for name in _PARSER_FACTORIES:
        factory = getattr(cli, name, None)
        if callable(factory):
            made = factory()
            if isinstance(made, argparse.ArgumentParser):
                return made
    raise RuntimeError(f"contextfold.cli has none of {', '.join(_PARSER_FACTORIES)}")


def _commands(
    parser: argparse.ArgumentParser, path: str
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Every command under ``parser``, depth first, with its help line."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            yield f"{path} {name}", helps.get(name, ""), sub
            yield from _commands(sub, f"{path} {name}")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    # serve and worker hand their defaults to contextfold.options (argparse sees SUPPRESS)
    specs = parser.get_default("_option_specs")
    configured = {spec.dest: spec for spec in specs[1]} if specs else {}
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
            name = ", ".join(f"`{flag}{value}`" for flag in action.option_strings)
        else:
            name = f"`{action.metavar or action.dest}`"
        spec = configured.get(action.dest)
        default = spec.default if spec is not None else action.default
        required = spec.required if spec is not None else action.required
        blank = default in (None, False, argparse.SUPPRESS, [], ()) or required
        shown = "" if blank else f"`{default}`"
        help_text = (action.help or "") % {"default": default} if action.help else ""
        rows.append(f"| {name} | {shown} | {_cell(help_text)} |")
    return rows


def cli_markdown() -> str:
    """Every command: its help, its usage line and a table of its arguments."""
    parser = _cli_parser()
    parts = [f"```\n{parser.format_usage().strip()}\n```\n"]
    for path, help_line, sub in _commands(parser, parser.prog):
        parts.append(f"## `{path}`\n")
        description = sub.description or help_line
        if description:
            parts.append(f"{_cell(description)}\n")
        parts.append(f"```\n{sub.format_usage().strip()}\n```\n")
        rows = _argument_rows(sub)
        if rows:
            parts.append("| argument | default | what it does |\n|---|---|---|")
            parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def _openapi() -> dict[str, Any]:
    app_module = importlib.import_module("contextfold.server.app")
    settings_module = importlib.import_module("contextfold.server.settings")
    settings = settings_module.Settings(database="memory://")  # nothing starts: no lifespan runs
    schema: dict[str, Any] = app_module.create_app(settings).openapi()
    return schema


def _type(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = str(schema["$ref"].rsplit("/", 1)[-1])
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type(option, spec) for option in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}), spec)}"
    return str(kind)


def _fields(name: str, spec: dict[str, Any]) -> list[str]:
    model = spec["components"]["schemas"][name]
    required = set(model.get("required", ()))
    rows = [f"### {name}\n"]
    if model.get("description"):
        rows.append(f"{_cell(model['description'])}\n")
    if "properties" not in model:
        return [*rows, f"Type: {_cell(_type(model, spec))}\n"]
    rows += ["| field | type | required | description |", "|---|---|---|---|"]
    for field, prop in model.get("properties", {}).items():
        rows.append(
            f"| `{field}` | {_cell(_type(prop, spec))} | {'yes' if field in required else ''} "
            f"| {_cell(prop.get('description', ''))} |"
        )
    return rows


def _operation(path: str, method: str, op: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`\n"]
    if op.get("description") or op.get("summary"):
        lines.append(f"{op.get('description') or op.get('summary')}\n")
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for param in params:
            kind = _type(param.get("schema", {}), spec)
            lines.append(
                f"| `{param['name']}` | {param['in']} | {_cell(kind)} "
                f"| {'yes' if param.get('required') else ''} "
                f"| {_cell(param.get('description', ''))} |"
            )
        lines.append("")
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        lines.append(f"Request body ({media}): {_type(content.get('schema', {}), spec)}\n")
    responses = op.get("responses", {})
    if responses:
        lines += ["| status | meaning | body |", "|---|---|---|"]
        for status, response in responses.items():
            content = response.get("content", {})
            kinds = ", ".join(
                _type(item.get("schema", {}), spec) if item.get("schema") else media
                for media, item in content.items()
            )
            lines.append(f"| {status} | {_cell(response.get('description', ''))} | {kinds} |")
        lines.append("")
    return lines


def http_markdown() -> str:
    """Every operation of the app's OpenAPI schema, grouped by its first tag."""
    spec = _openapi()
    groups: dict[str, list[str]] = {}
    for path, item in spec["paths"].items():
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            tag = (op.get("tags") or ["other"])[0]
            groups.setdefault(tag, []).extend(_operation(path, method, op, spec))
    info = spec.get("info", {})
    parts = [f"API version: {info.get('title')} {info.get('version')}.\n"]
    for tag, lines in groups.items():
        parts.append(f"## {tag}\n")
        parts.append("\n".join(lines))
    parts.append("## Schemas\n")
    for name in sorted(spec.get("components", {}).get("schemas", {})):
        parts.append("\n".join(_fields(name, spec)) + "\n")
    return "\n".join(parts)


def _options(strategy: object) -> str:
    """A strategy's short scalar options, as it is built by default."""
    if not dataclasses.is_dataclass(strategy):
        return ""
    shown = []
    for field in dataclasses.fields(strategy):
        value = getattr(strategy, field.name)
        if field.name != "name" and isinstance(value, bool | int | float | str):
            text = repr(value)
            if len(text) <= 30:
                shown.append(f"{field.name}={text}")
    return ", ".join(shown)


def presets_markdown() -> str:
    """Every registered preset: model or not, recall, description, strategies with defaults."""
    package = importlib.import_module("contextfold")
    strategies_module = importlib.import_module("contextfold.strategies")
    infos = {info.name: info for info in strategies_module.describe_presets()}
    default = strategies_module.DEFAULT_PRESET
    rows = [
        "| preset | model | recall | what it does | strategies, in order, with their defaults |",
        "|---|---|---|---|---|",
    ]
    for name in package.preset_names():
        with warnings.catch_warnings():  # round-compressor's deprecation has a page of its own
            warnings.simplefilter("ignore", DeprecationWarning)
            pipeline = package.get_preset(name)
        strategies = "<br>".join(
            f"`{type(s).__name__}({_options(s)})`" for s in pipeline.strategies
        )
        recall = "on" if getattr(pipeline, "recall", False) else "off"
        info = infos[name]
        model = "yes" if info.model else "no"
        about = _cell(info.description) + (" (the default)" if name == default else "")
        rows.append(
            f"| `{name}` | {model} | {recall} | {about} | {_cell(strategies) or 'none: never folds'} |"
        )
    return "\n".join(rows) + "\n"


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    raise RuntimeError(f"contextfold.cli has no command {name!r}")


def _config_default(spec: Any) -> str:
    if spec.required:
        return "required"
    if spec.kind == "switch":
        return "off"
    if spec.default in (None, [], ()):
        return ""
    return f"`{spec.default}`"


def _config_value(spec: Any) -> str:
    if spec.kind == "switch":
        return "true or false"
    if spec.kind == "list":
        return "strings (a TOML list; comma-separated in the variable)"
    if spec.choices:
        return "one of " + ", ".join(f"`{choice}`" for choice in spec.choices)
    return {int: "an integer", float: "a number"}.get(spec.convert, "a string")


def config_markdown() -> str:
    """Every setting of the configurable commands: flag, variable, TOML key, default, help."""
    options = importlib.import_module("contextfold.options")
    parser = _cli_parser()
    parts = []
    for command in CONFIGURED_COMMANDS:
        sub = _subcommand(parser, command)
        _, specs = sub.get_default(options._SPECS)
        helps = {a.dest: a.help or "" for a in sub._actions}
        parts.append(f"## `contextfold {command}`: the `[{command}]` table\n")
        parts.append(
            "| flag | variable | TOML key | value | default | what it sets |\n"
            "|---|---|---|---|---|---|"
        )
        rows = [
            f"| `--{spec.name}` | `{spec.variable}` | `{spec.name}` | {_config_value(spec)} "
            f"| {_config_default(spec)} | {_cell(helps.get(spec.dest, ''))} |"
            for spec in specs
        ]
        rows.append(
            f"| `--config` | `{options.CONFIG_ENV}` | | a path | | the TOML file itself "
            f"(tables {', '.join(f'`[{name}]`' for name in options.TABLES)}) |"
        )
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)
