"""The errors contextfold raises.

Every error derives from one root, so callers can catch ``ContextfoldError``::

    ContextfoldError
    ├── InvalidInput          bad message, file or argument; names index and field
    ├── BudgetError           budget cannot hold the system prompt + latest user message
    ├── StoreError            a backend failed
    │   ├── NotFound          unknown session
    │   ├── DamagedFold       a stored fold row cannot be read (the view quarantines it)
    │   └── VersionConflict   a versioned record moved since it was read
    │       ├── FoldConflict  the view's fold set moved since the job was planned
    │       └── ViewConflict  the view's configuration moved since it was read
    ├── ModelError            a model call failed (status and body when known)
    └── MissingExtra          an optional part's extra is not installed (also an ImportError)

Errors from drivers and SDKs are translated where they are raised, with
``raise ... from exc``, so nothing below this tree escapes the library.
"""

from __future__ import annotations


class ContextfoldError(Exception):
    """Root of every error the library raises on purpose."""


class InvalidInput(ContextfoldError, ValueError):
    """Input refused before anything was stored.

    ``index`` is the message index (or line number for files) and ``field`` the
    offending field, so a user can find the fault without reading a traceback.
    """

    def __init__(self, reason: str, *, index: int | None = None, field: str | None = None) -> None:
        self.reason = reason
        self.index = index
        self.field = field
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(f"{prefix}{reason}")


class BudgetError(ContextfoldError, ValueError):
    """The budget cannot hold what must always be rendered."""

    def __init__(self, budget: int, required: int) -> None:
        self.budget = budget
        self.required = required
        super().__init__(
            f"budget of {budget} tokens is smaller than the system prompt plus the latest "
            f"user message ({required} tokens)"
        )


class StoreError(ContextfoldError):
    """A store backend failed."""


class NotFound(StoreError, KeyError):
    """The session does not exist."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not found"


class DamagedFold(StoreError):
    """A stored fold cannot be read back as a fold (edited or damaged by hand).

    Raised by a store's fold read; the view catches it, quarantines the fold
    (``Store.quarantine_fold``) and renders from the log instead.
    """

    def __init__(self, session: str, view: str, fold_id: str, reason: str) -> None:
        self.session = session
        self.view = view
        self.fold_id = fold_id
        self.reason = reason
        super().__init__(f"fold {fold_id!r} of {session}/{view} is damaged: {reason}")


class VersionConflict(StoreError):
    """A versioned record moved since it was read; read it again and retry."""

    what = "record"
    by = "the caller expected"

    def __init__(self, view: str, expected: int, actual: int) -> None:
        self.view = view
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{self.what} of view {view!r} is at version {actual}, {self.by} {expected}"
        )


class FoldConflict(VersionConflict):
    """The view's folds changed since the job was planned; re-plan and retry."""

    what = "fold set"
    by = "the job was planned at"


class ViewConflict(VersionConflict):
    """The view's stored configuration changed since the caller read it."""

    what = "configuration"
    by = "the update expected"


class ModelError(ContextfoldError):
    """A model call failed or returned unusable output."""

    def __init__(self, message: str, *, status: int | None = None, body: str | None = None) -> None:
        self.status = status
        self.body = body
        super().__init__(message)


class MissingExtra(ContextfoldError, ImportError):
    """An optional part was used without its extra installed; the message says what to install.

    Also an ``ImportError``, so code that guards an optional import keeps working.
    """

    def __init__(self, what: str, extra: str) -> None:
        self.what = what
        self.extra = extra
        super().__init__(f"{what} needs the {extra} extra: pip install 'contextfold[{extra}]'")
