"""The layer rule of DESIGN.md: imports point down only.

Every module under ``src/contextfold`` gets a layer from the folder it sits in
(a module with no layer fails the suite), and is read with ``ast`` (imports
inside functions and ``TYPE_CHECKING`` blocks count too)::

    interfaces   cli · options (where a command's settings come from) · redact (passwords out of
                 what is shown) · testing/ · integrations/ (TaskWeaver hooks) · server/ · workers/ ·
                 evaluation/ (contextfold eval)
    runtime      runtime/
    memory       memory/
    strategies   strategies/          (of the ports: the LLM protocol only)
    ports        llm/ · store/        (never each other)
    shared       formats/ (provider formats and prompt checks) ·
                 extract/ (key sentences and must-keep items)     (never each other)
    core         core/                (the vocabulary: messages, units, folds, tokens, render, errors)

A module may import its own layer and the layers below it; two layers of one
rank (the ports, the shared layers) never import each other. Only the package
root, which re-exports the public face, may import from every layer.

One door: an interface reaches data through ``Memory`` and ``Session`` only. It
imports no ``contextfold.store`` module, reads no attribute named ``store`` (a
store handed on is a store reached), and builds no ``Session`` or ``View``
itself (``Memory.session``/``existing_session`` and ``Session.view`` check what
they open). The exceptions exist to test stores: the store contract suites, and
``testing.damage`` and ``testing.damage_target``, which damage rows to show what reading them does.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "contextfold"
RANK = {
    "core": 0,
    "formats": 1,
    "extract": 1,
    "llm": 2,
    "store": 2,
    "strategies": 3,
    "memory": 4,
    "runtime": 5,
    "interfaces": 6,
}
FOLDERS = {"core", "formats", "extract", "llm", "store", "strategies", "memory", "runtime"}
TOP_LEVEL_INTERFACES = {"cli", "options", "redact"}
INTERFACE_FOLDERS = {"evaluation", "integrations", "server", "testing", "workers"}
# What a strategy may know of the ports: the LLM protocol, nothing concrete.
STRATEGY_PORTS = {"contextfold.llm.base"}
# Interface modules that exist to test stores, so reach them directly.
STORE_TESTERS = {"contextfold.testing.damage", "contextfold.testing.damage_target"}
STORE_TESTER_PREFIX = "contextfold.testing.store_contract"
HANDLES = {"Session", "View"}


def module_name(path: Path) -> str:
    parts = ["contextfold", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package root
    top = parts[1]
    if top in INTERFACE_FOLDERS or (len(parts) == 2 and top in TOP_LEVEL_INTERFACES):
        return "interfaces"
    return top if top in FOLDERS else None


def imported(path: Path, module: str | None = None) -> set[str]:
    """Every ``contextfold`` module ``path`` imports, relative imports resolved."""
    package = package_of(path, module)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.add(source_of(node, package))
    return {m for m in out if m == "contextfold" or m.startswith("contextfold.")}


def package_of(path: Path, module: str | None = None) -> str:
    """The package ``path``'s relative imports start from."""
    module = module or module_name(path)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def source_of(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` reads from, a relative one resolved."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


ALL_MODULES = sorted((module_name(path), path) for path in PACKAGE.rglob("*.py"))
MODULES = [(name, path) for name, path in ALL_MODULES if name != "contextfold"]


def test_every_module_has_a_layer() -> None:
    assert [name for name, _ in MODULES if layer_of(name) is None] == []


def test_every_layer_has_modules() -> None:
    assert {layer_of(name) for name, _ in MODULES} == set(RANK)


def upward(module: str, path: Path, *, module_of_path: str | None = None) -> list[str]:
    """What ``path`` imports from above its layer, from a sibling of its rank, or from the root."""
    layer = layer_of(module)
    assert layer is not None
    bad = []
    for target in sorted(imported(path, module_of_path)):
        other = layer_of(target)
        if (
            other is None
            or RANK[other] > RANK[layer]
            or (RANK[other] == RANK[layer] and other != layer)
            or (
                layer == "strategies" and other in ("llm", "store") and target not in STRATEGY_PORTS
            )
        ):
            bad.append(target)
    return bad


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[name for name, _ in MODULES])
def test_imports_point_down_only(module: str, path: Path) -> None:
    found = upward(module, path)
    assert found == [], f"{module} ({layer_of(module)}) imports from above its layer: {found}"


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from contextfold.llm.base import LLM\n"
        "from contextfold.llm.offline import OfflineModel\n"
        "from contextfold.runtime.thread import ThreadRunner\n"
        "from contextfold.core.folds import Fold\n"
    )
    found = upward(
        "contextfold.strategies.probe", probe, module_of_path="contextfold.strategies.probe"
    )
    assert found == ["contextfold.llm.offline", "contextfold.runtime.thread"]


def test_the_shared_layers_never_import_each_other(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from contextfold.extract.salience import key_sentences\n"
        "from contextfold.core.messages import Message\n"
        "from contextfold.llm.base import LLM\n"
    )
    found = upward("contextfold.formats.probe", probe, module_of_path="contextfold.formats.probe")
    assert found == ["contextfold.extract.salience", "contextfold.llm.base"]


def past_the_door(path: Path, module: str | None = None) -> list[str]:
    """Where an interface module reaches data other than through ``Memory``/``Session``."""
    package = package_of(path, module)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            # ``from contextfold import store`` names the package in the imported name.
            source = source_of(node, package) if isinstance(node, ast.ImportFrom) else ""
            names = [".".join(filter(None, (source, alias.name))) for alias in node.names]
            if any(n == "contextfold.store" or n.startswith("contextfold.store.") for n in names):
                found.append(f"line {node.lineno}: imports from {source or names[0]}")
        elif isinstance(node, ast.Attribute) and node.attr == "store":
            found.append(f"line {node.lineno}: reads {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in HANDLES:
                found.append(f"line {node.lineno}: builds {name}(...)")
    return found


INTERFACES = [
    (name, path)
    for name, path in MODULES
    if layer_of(name) == "interfaces"
    and name not in STORE_TESTERS
    and not name.startswith(STORE_TESTER_PREFIX)
]


@pytest.mark.parametrize(("module", "path"), INTERFACES, ids=[name for name, _ in INTERFACES])
def test_interfaces_reach_data_through_memory_and_session_only(module: str, path: Path) -> None:
    found = past_the_door(path)
    assert found == [], f"{module} goes past Memory/Session: {found}"


def test_the_door_rule_catches_a_store_import_a_store_read_and_a_handle_built(
    tmp_path: Path,
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from contextfold.memory.session import Memory, Session\n"
        "from contextfold.store.ram import RAMStore\n"
        "from contextfold import store as stores\n"
        "import contextfold.memory.view as views\n"
        "from ..store.wake import LocalWake\n"
        "memory = Memory()\n"
        "ids = memory.store.list_sessions()\n"
        "session = Session(memory, 's', None, created_at=0.0)\n"
        "view = views.View(session, 'v', None)\n"
        "fine = memory.session('s').view('v').render()\n"
    )
    found = past_the_door(probe, "contextfold.server.probe")
    assert sorted(found) == [
        "line 2: imports from contextfold.store.ram",
        "line 3: imports from contextfold",
        "line 5: imports from contextfold.store.wake",
        "line 7: reads memory.store",
        "line 8: builds Session(...)",
        "line 9: builds View(...)",
    ]
    assert len(INTERFACES) > 40 and "contextfold.server.service" in dict(INTERFACES)
