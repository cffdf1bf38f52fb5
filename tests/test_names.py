"""One name, one meaning: no two modules of the package define the same public name.

Every public top-level class and function of ``src/contextfold`` is read with
``ast``; a name two modules define is a clash unless ``ALLOWED`` lists it, with
the modules it may live in and why the pair is deliberate. An HTTP route
handler is reached by its URL, never by its name, so it is not counted.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from test_layers import ALL_MODULES

# name: (the module prefixes every definition must be under, why the pair is deliberate)
ALLOWED: dict[str, tuple[tuple[str, ...], str]] = {
    **{
        name: (
            ("contextfold.store.",),
            "one store operation, defined once by each backend that has it (SQLite, PostgreSQL)",
        )
        for name in (
            "delete_session",
            "get_api_key",
            "index_logged",
            "insert_fold",
            "list_api_keys",
            "list_sessions",
            "migrate",
            "not_found",
            "one_row",
            "put_api_key",
            "read_path",
            "recount",
            "revoke_api_key",
            "session_info",
            "translated",
        )
    },
    "Memory": (
        ("contextfold.memory.", "contextfold.integrations.taskweaver."),
        "TaskWeaver's seed names its memory class Memory, and code written against the seed "
        "runs as written on the TaskWeaver hooks",
    ),
}
_ROUTE_METHODS = frozenset(
    {"get", "post", "put", "patch", "delete", "head", "options", "api_route", "websocket"}
)


def is_route(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated as a route (``@router.get(...)``, ``@app.post(...)``, ...)."""
    return any(
        isinstance(d, ast.Call)
        and isinstance(d.func, ast.Attribute)
        and d.func.attr in _ROUTE_METHODS
        for d in node.decorator_list
    )


def public_names(path: Path) -> set[str]:
    """The public classes and functions ``path`` defines at its top level, handlers aside."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and is_route(node):
            continue
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and not (
            node.name.startswith("_")
        ):
            names.add(node.name)
    return names


def clashes(modules: list[tuple[str, Path]]) -> dict[str, list[str]]:
    """Each name defined by two modules or more that ``ALLOWED`` does not let be."""
    where: defaultdict[str, list[str]] = defaultdict(list)
    for module, path in modules:
        for name in public_names(path):
            where[name].append(module)
    found = {}
    for name, modules_of in sorted(where.items()):
        if len(modules_of) < 2:
            continue
        prefixes = ALLOWED.get(name, ((), ""))[0]
        if not prefixes or not all(m.startswith(prefixes) for m in modules_of):
            found[name] = sorted(modules_of)
    return found


def test_no_two_modules_define_one_public_name() -> None:
    assert clashes(ALL_MODULES) == {}


def test_every_allowed_name_is_still_defined_twice() -> None:
    counts: defaultdict[str, int] = defaultdict(int)
    for _, path in ALL_MODULES:
        for name in public_names(path):
            counts[name] += 1
    assert [name for name in ALLOWED if counts[name] < 2] == []


def test_the_rule_catches_a_clash_and_skips_handlers(tmp_path: Path) -> None:
    first, second, third = (tmp_path / f"m{i}.py" for i in range(3))
    first.write_text("class Checked:\n    pass\n\n\ndef recount():\n    pass\n")
    second.write_text(
        "def Checked():\n    pass\n\n\n@router.get('/x')\nasync def render():\n    pass\n"
    )
    third.write_text(
        "def render():\n    pass\n\n\ndef recount():\n    pass\n\n\ndef _own():\n    pass\n"
    )
    modules = [
        ("contextfold.strategies.m0", first),
        ("contextfold.memory.m1", second),
        ("contextfold.core.m2", third),
    ]
    assert clashes(modules) == {
        "Checked": ["contextfold.memory.m1", "contextfold.strategies.m0"],
        "recount": ["contextfold.core.m2", "contextfold.strategies.m0"],
    }
