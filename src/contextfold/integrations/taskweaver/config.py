"""The seed's configuration keys, read from a JSON or TOML file.

::

    {
      "compaction.enabled": true,
      "compaction.threshold": 10,
      "compaction.retain_recent": 3,
      "planner.compaction_prompt_path": "planner_compaction_prompt.txt",
      "code_interpreter.compaction_prompt_path": "code_interpreter_compaction_prompt.txt"
    }

Keys are flat, as in TaskWeaver's ``taskweaver_config.json``; nested tables
(TOML's ``[compaction]`` or ``compaction.threshold = 10``) are read as the same
dotted keys. A TaskWeaver config file holds many other keys, which are left
alone; a key under ``compaction.`` or named ``<role>.compaction_...`` that is
not one of these is a typo and refused, naming it. Prompt paths are relative to
the file. ``compaction.enabled`` defaults to true: a file that configures
compaction means to have it; set it to false to switch compaction off.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.integrations.taskweaver.compactor import CompactorConfig

PROMPT_SUFFIX = ".compaction_prompt_path"
_DEFAULTS = CompactorConfig()


@dataclass(frozen=True)
class CompactionSettings:
    """What a config file says about compaction; ``prompt_paths`` maps role to path."""

    enabled: bool = True
    threshold: int = _DEFAULTS.threshold
    retain_recent: int = _DEFAULTS.retain_recent
    prompt_paths: Mapping[str, str] = field(default_factory=dict)

    def prompt_path(self, role: str) -> str:
        """The role's prompt path; ``CodeInterpreter`` finds ``code_interpreter.`` keys too."""
        return self.prompt_paths.get(role) or self.prompt_paths.get(config_name(role), "")

    def compactor_config(self, role: str) -> CompactorConfig:
        return CompactorConfig(self.threshold, self.retain_recent, self.prompt_path(role))

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], *, base_dir: Path | None = None
    ) -> CompactionSettings:
        """Settings from already parsed keys (flat or nested); errors name the key."""
        flat = _flatten(values)
        enabled = flat.pop("compaction.enabled", True)
        if not isinstance(enabled, bool):
            raise InvalidInput(
                f"must be true or false, not {enabled!r}", field="compaction.enabled"
            )
        counts = {}
        for name in ("threshold", "retain_recent"):
            key = f"compaction.{name}"
            value = flat.pop(key, getattr(_DEFAULTS, name))
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInput(f"must be a whole number >= 0, not {value!r}", field=key)
            counts[name] = value
        prompts: dict[str, str] = {}
        for key, value in flat.items():
            if key.endswith(PROMPT_SUFFIX) and not key.startswith("compaction."):
                if not isinstance(value, str) or not value:
                    raise InvalidInput(f"must be a file path, not {value!r}", field=key)
                path = Path(value) if base_dir is None else base_dir / value
                if not path.is_file():
                    raise InvalidInput(f"prompt file {path} does not exist", field=key)
                prompts[key.removesuffix(PROMPT_SUFFIX)] = str(path)
            elif key.startswith("compaction.") or ".compaction_" in key:
                raise InvalidInput(
                    "unknown compaction key (known: compaction.enabled, compaction.threshold, "
                    f"compaction.retain_recent, <role>{PROMPT_SUFFIX})",
                    field=key,
                )
        return cls(enabled, counts["threshold"], counts["retain_recent"], prompts)


def load_config(path: str | Path) -> CompactionSettings:
    """Read the compaction keys of a ``.json`` or ``.toml`` file."""
    file = Path(path)
    if file.suffix not in (".json", ".toml"):
        raise InvalidInput(f"config file {file} must be .json or .toml", field="path")
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read config file {file}: {exc}", field="path") from exc
    try:
        values = (
            tomllib.loads(raw.decode("utf-8"))
            if file.suffix == ".toml"
            else json.loads(raw.decode("utf-8"))
        )
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"config file {file} is not valid: {exc}", field="path") from exc
    if not isinstance(values, dict):
        raise InvalidInput(f"config file {file} must hold an object of keys", field="path")
    return CompactionSettings.from_mapping(values, base_dir=file.parent)


def config_name(role: str) -> str:
    """``CodeInterpreter`` -> ``code_interpreter``: TaskWeaver's config names of role aliases."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", role).lower()


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
