"""The PostgreSQL backend (``pip install contextfold[postgres]``), with its own migrations.

Importing it imports psycopg; ``open_store`` does so only for a ``postgresql://`` URL.
"""

from contextfold.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
