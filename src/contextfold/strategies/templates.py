"""Prompt templates: one text file per prompt, overridable per view.

Built-in templates live in ``contextfold/strategies/prompts/<name>.txt``. A strategy takes
``prompt=`` (a path or the template text itself) so a view can use its own.
Placeholders are ``{name}`` fields filled with ``str.format``.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from contextfold.core.errors import InvalidInput


def load_template(name: str, override: str | Path | None = None) -> str:
    """The text of template ``name``, or of ``override`` (a file path or literal text)."""
    if override is not None:
        if isinstance(override, Path) or (
            "\n" not in str(override) and str(override).endswith((".txt", ".md", ".yaml"))
        ):
            path = Path(override)
            if not path.is_file():
                raise InvalidInput(f"prompt template {path} does not exist", field="prompt")
            return path.read_text(encoding="utf-8")
        return str(override)
    resource = importlib.resources.files("contextfold.strategies").joinpath(
        "prompts", f"{name}.txt"
    )
    if not resource.is_file():
        raise InvalidInput(f"no built-in prompt template {name!r}", field="prompt")
    return resource.read_text(encoding="utf-8")


def fill(template: str, **fields: object) -> str:
    """Fill ``{name}`` fields; a missing field is an error naming it."""
    try:
        return template.format(**fields)
    except KeyError as exc:
        raise InvalidInput(f"prompt template needs field {exc.args[0]!r}", field="prompt") from exc
