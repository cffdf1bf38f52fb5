"""Stores: one protocol, one module per backend, one contract test suite."""

from contextfold.store.base import Store
from contextfold.store.memory import MemoryStore
from contextfold.store.sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store"]
