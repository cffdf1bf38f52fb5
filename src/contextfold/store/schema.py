"""What every backend's migrations share: a numbered list, applied in order once.

Each backend keeps its own list beside its code (``contextfold.store.sqlite.migrations``,
``contextfold.store.postgres.migrations``) and records the names it applied in
its database; ``pending`` says what is left and refuses a database a newer
contextfold wrote.
"""

from __future__ import annotations

from contextfold.core.errors import StoreError

Migrations = list[tuple[str, tuple[str, ...]]]


def pending(migrations: Migrations, done: set[str], where: str) -> Migrations:
    """The migrations not applied yet, in order; every store applies its own list this way.

    Refuses a database recording migrations this code does not know: a newer
    contextfold wrote it, and this one would misread it.
    """
    unknown = done - {name for name, _ in migrations}
    if unknown:
        raise StoreError(
            f"{where} was written by a newer contextfold (schema migrations "
            f"{sorted(unknown)} are unknown here); upgrade contextfold to open it"
        )
    return [(name, statements) for name, statements in migrations if name not in done]
