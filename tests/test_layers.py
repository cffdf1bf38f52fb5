"""The layer rule of DESIGN.md: imports point down only.

Every module under ``src/contextfold`` is read with ``ast`` (imports inside
functions and ``TYPE_CHECKING`` blocks count too) and checked against the
layers it may not import from:

* ports (``llm``, ``store``) know nothing of strategies, the memory layer, the
  runtime or the interfaces;
* core modules know nothing of those nor of the ports;
* strategies know the core and the LLM protocol, never the memory layer, the
  runtime, the interfaces or a store;
* none of them imports the package root, which re-exports every layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "contextfold"
CORE = frozenset(
    {
        "messages",
        "tokens",
        "folds",
        "entries",
        "units",
        "render",
        "artifacts",
        "salience",
        "log",
        "errors",
    }
)
ABOVE_PORTS = ("strategies", "session", "view", "runtime", "cli", "taskweaver")
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "llm": ABOVE_PORTS,
    "store": ABOVE_PORTS,
    "core": (*ABOVE_PORTS, "llm", "store"),
    "strategies": ("session", "view", "runtime", "cli", "taskweaver", "store"),
}


def module_name(path: Path) -> str:
    parts = ["contextfold", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None
    if parts[1] in ("llm", "store", "strategies"):
        return parts[1]
    if len(parts) == 2 and parts[1] in CORE:
        return "core"
    return None


def imported(path: Path) -> set[str]:
    """Every ``contextfold`` module ``path`` imports, relative imports resolved.

    ``from contextfold import x`` counts as importing ``contextfold.x``.
    """
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            out.add(source)
            out.update(f"{source}.{alias.name}" for alias in node.names)
    return {m for m in out if m == "contextfold" or m.startswith("contextfold.")}


def is_under(module: str, top: str) -> bool:
    target = f"contextfold.{top}"
    return module == target or module.startswith(target + ".")


MODULES = sorted(
    (module_name(path), path)
    for path in PACKAGE.rglob("*.py")
    if layer_of(module_name(path)) is not None
)


def test_every_layer_has_modules() -> None:
    layers = {layer_of(name) for name, _ in MODULES}
    assert layers == set(FORBIDDEN)


def upward(module: str, path: Path) -> list[str]:
    """The modules ``path`` imports from above its layer, or from the package root."""
    layer = layer_of(module)
    assert layer is not None
    return sorted(
        target
        for target in imported(path)
        if target == "contextfold" or any(is_under(target, top) for top in FORBIDDEN[layer])
    )


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[name for name, _ in MODULES])
def test_imports_point_down_only(module: str, path: Path) -> None:
    found = upward(module, path)
    assert found == [], f"{module} ({layer_of(module)}) imports from above its layer: {found}"
