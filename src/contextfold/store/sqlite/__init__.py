"""The SQLite backend: one file shared by threads and processes, with its own migrations."""

from contextfold.store.sqlite.connect import Durability
from contextfold.store.sqlite.store import SQLiteStore

__all__ = ["Durability", "SQLiteStore"]
