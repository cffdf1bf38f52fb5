"""Prompt templates: one text file per prompt, overridable per view.

Built-in templates live in ``contextfold/strategies/prompts/<name>.txt``. A strategy takes
``prompt=`` (a path or the template text itself) so a view can use its own.
Placeholders are ``{name}`` fields filled with ``str.format``; a literal brace
is written twice (``{{``). A template with a stray brace, a positional field or
an expression field is refused with ``InvalidInput`` naming ``prompt``.
"""

from __future__ import annotations

import importlib.resources
import string
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


def check_template(template: str) -> list[str]:
    """The ``{name}`` fields of ``template``, or ``InvalidInput`` saying what is wrong."""
    opening = " ".join(template.split())[:60]
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InvalidInput(
            f"prompt template {opening!r}...: {exc} (write a literal brace twice: {{{{ or }}}})",
            field="prompt",
        ) from None
    names = [name for _, name, _, _ in parsed if name is not None]
    for name in names:
        if not name.isidentifier():
            raise InvalidInput(
                f"prompt template {opening!r}...: field {{{name}}} is not a plain {{name}} "
                "(write a literal brace twice: {{ or }})",
                field="prompt",
            )
    return names


def fill(template: str, **fields: object) -> str:
    """Fill ``{name}`` fields; a missing or malformed field is an error naming the template."""
    for name in check_template(template):
        if name not in fields:
            raise InvalidInput(f"prompt template needs field {name!r}", field="prompt")
    return template.format(**fields)
