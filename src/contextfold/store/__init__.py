"""Stores: one protocol, one module per backend, one contract test suite."""

from contextfold.store.base import Store
from contextfold.store.ram import RAMStore
from contextfold.store.sqlite import SQLiteStore

__all__ = ["RAMStore", "SQLiteStore", "Store"]
