"""The package's public face: a curated, sorted ``__all__`` that resolves."""

from __future__ import annotations

import contextfold


def isort_style(name: str) -> tuple[bool, bool, str]:
    """ruff's order for ``__all__``: constants, then classes, then functions."""
    return (not name.isupper(), not name[0].isupper(), name)


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert contextfold.__all__ == sorted(contextfold.__all__, key=isort_style)
    assert len(set(contextfold.__all__)) == len(contextfold.__all__)
    for name in contextfold.__all__:
        assert getattr(contextfold, name) is not None, name


def test_the_readme_example_names_are_exported() -> None:
    for name in ("Memory", "Session", "View", "Fold", "render", "get_preset", "get_model"):
        assert name in contextfold.__all__


def test_every_error_derives_from_the_root() -> None:
    errors = [
        getattr(contextfold, n)
        for n in contextfold.__all__
        if n.endswith(("Error", "Conflict", "Input", "Found"))
    ]
    assert errors
    for error in errors:
        assert issubclass(error, contextfold.ContextfoldError)
