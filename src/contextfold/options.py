"""Settings of ``serve`` and ``worker`` from flags, the environment and a TOML file.

One rule for every flag ``--some-flag`` of a command: the environment variable
``CONTEXTFOLD_SOME_FLAG`` and the key ``some-flag`` of the command's table
(``[serve]`` or ``[worker]``) in the file named by ``--config PATH`` or
``CONTEXTFOLD_CONFIG``. A flag given on the command line wins over the
variable, the variable over the file, the file over the flag's default.

``configurable(parser, command)`` is called once the command's flags are
declared: it adds ``--config`` and records each flag's default, so that argparse
leaves out a flag not given and ``resolve`` can tell it from one given with its
default value. ``resolve`` fills every flag and remembers where each value came
from, so a later check can name the variable or the file. A value that cannot
be read, or a key no flag has, is an ``InvalidInput`` naming the key and where it
came from (the CLI prints it on one line and exits 2). Values are never echoed
for text flags: a database URL may carry a password. ``positive_int`` and
``positive_seconds`` are the flag types every subcommand shares.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextfold.core.errors import InvalidInput

ENV_PREFIX = "CONTEXTFOLD_"
CONFIG_ENV = "CONTEXTFOLD_CONFIG"
TABLES = ("serve", "worker", "model_windows")
"""The file's tables: one a command, and ``model_windows`` (read by ``serve``'s proxy)."""
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
_SPECS = "_option_specs"
SOURCES = "_option_sources"


@dataclass(frozen=True)
class Option:
    """One flag as the environment and the file see it."""

    dest: str
    name: str
    kind: str  # "switch" (store_true), "list" (append) or "value"
    convert: Callable[[str], Any] | None
    choices: tuple[Any, ...] | None
    default: Any
    required: bool

    @property
    def variable(self) -> str:
        return ENV_PREFIX + self.name.upper().replace("-", "_")


def configurable(parser: argparse.ArgumentParser, command: str) -> None:
    """Let every flag of ``parser`` (the ``command`` subparser) come from the environment or a file."""
    specs: list[Option] = []
    for action in parser._actions:
        long = [s for s in action.option_strings if s.startswith("--")]
        if not long or action.dest == "help":
            continue
        if isinstance(action, argparse._StoreTrueAction):
            kind = "switch"
        elif isinstance(action, argparse._AppendAction):
            kind = "list"
        else:
            kind = "value"
        specs.append(
            Option(
                dest=action.dest,
                name=long[0][2:],
                kind=kind,
                convert=action.type if callable(action.type) else None,
                choices=tuple(action.choices) if action.choices else None,
                default=action.default,
                required=action.required,
            )
        )
        action.default = argparse.SUPPRESS
        action.required = False
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help=f"a TOML file whose [{command}] table sets any of these flags (default: "
        f"${CONFIG_ENV})",
    )
    parser.set_defaults(**{_SPECS: (command, tuple(specs))})
    parser.epilog = (
        f"Every flag may also come from the environment, {ENV_PREFIX} and its name in capitals "
        f"with '-' as '_' (--some-flag: {ENV_PREFIX}SOME_FLAG), or from the [{command}] table "
        f"of the TOML file --config PATH (or ${CONFIG_ENV}), keys named as the flags "
        f"(some-flag = ...). A flag given wins over the environment, the environment over "
        f"the file, the file over the default."
    )


def resolve(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Fill ``args`` with every flag's value (flag > environment > file > default).

    Returns the file's tables (empty without a file), so a command reads its
    other tables (``model_windows``) from the same file.
    """
    env = os.environ if environ is None else environ
    command, specs = getattr(args, _SPECS)
    path = getattr(args, "config", None) or env.get(CONFIG_ENV) or None
    tables = read_file(Path(path)) if path else {}
    args.config = path
    table = tables.get(command, {})
    known = {spec.name: spec for spec in specs}
    for key in table:
        if key not in known:
            raise InvalidInput(
                f"{path} [{command}]: unknown key {key!r} (keys are the flags' names: "
                f"{', '.join(sorted(known))})",
                field=key,
            )
    sources: dict[str, str] = {}
    for spec in specs:
        if spec.dest in args:
            sources[spec.dest] = f"--{spec.name}"
            continue
        if spec.variable in env:
            where = spec.variable
            value = _from_env(spec, env[spec.variable], where)
        elif spec.name in table:
            where = f"{path} [{command}] {spec.name}"
            value = _from_file(spec, table[spec.name], where)
        elif spec.required:
            raise InvalidInput(
                f"--{spec.name} is required (or {spec.variable}, or {spec.name} in the "
                f"[{command}] table of --config)",
                field=spec.name,
            )
        else:
            where = "default"
            value = list(spec.default) if spec.kind == "list" else spec.default
        if spec.choices is not None and value not in spec.choices:
            shown = ", ".join(map(str, spec.choices))
            raise InvalidInput(f"{where}: {value!r} is not one of {shown}", field=spec.name)
        setattr(args, spec.dest, value)
        sources[spec.dest] = where
    setattr(args, SOURCES, sources)
    return tables


def source(args: argparse.Namespace, dest: str) -> str:
    """Where ``dest``'s value came from: ``--flag``, a variable, ``file [table] key`` or ``default``."""
    found: str = getattr(args, SOURCES, {}).get(dest, "default")
    return found


def named(exc: InvalidInput, args: argparse.Namespace) -> InvalidInput:
    """``exc`` (a later check of a flag's value) with where that value came from."""
    if exc.field is None or source(args, exc.field) == "default":
        return exc
    return InvalidInput(f"{exc.reason} (from {source(args, exc.field)})", field=exc.field)


def read_file(path: Path) -> dict[str, Any]:
    """The TOML file's tables; only the known tables are allowed, each a table."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}", field="config") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not TOML: {exc}", field="config") from None
    for key, value in data.items():
        if key not in TABLES:
            raise InvalidInput(
                f"{path}: unknown table or key {key!r} (tables: {', '.join(TABLES)})", field=key
            )
        if not isinstance(value, dict):
            raise InvalidInput(f"{path}: {key} must be a table ([{key}])", field=key)
    return data


def _from_env(spec: Option, raw: str, where: str) -> Any:
    if spec.kind == "switch":
        word = raw.strip().lower()
        if word not in _TRUE | _FALSE:
            raise InvalidInput(f"{where} must be true or false (1/0, yes/no)", field=spec.name)
        return word in _TRUE
    if spec.kind == "list":
        return [part.strip() for part in raw.split(",") if part.strip()]
    return _typed(spec, raw, where)


def _from_file(spec: Option, value: Any, where: str) -> Any:
    if spec.kind == "switch":
        if not isinstance(value, bool):
            raise InvalidInput(f"{where} must be true or false", field=spec.name)
        return value
    if spec.kind == "list":
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidInput(f"{where} must be a string or a list of strings", field=spec.name)
        return values
    if spec.convert in (int, float):
        wanted = (int,) if spec.convert is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted):
            kind = "an integer" if spec.convert is int else "a number"
            raise InvalidInput(f"{where} must be {kind}, not {value!r}", field=spec.name)
        return spec.convert(value)
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a string", field=spec.name)
    return _typed(spec, value, where)


def _typed(spec: Option, raw: str, where: str) -> Any:
    if spec.convert is None:
        return raw
    try:
        return spec.convert(raw.strip())
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        kind = {int: "an integer", float: "a number"}.get(spec.convert, "valid")  # type: ignore[call-overload]
        raise InvalidInput(f"{where} must be {kind}, not {raw!r}", field=spec.name) from None


def positive_int(text: str) -> int:
    """A command-line argument that must be a whole number above 0 (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """A command-line argument that must be seconds above 0 (an argparse ``type``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value
