"""Stores: one protocol, one module per backend, one URL registry.

The contract every backend passes ships as ``contextfold.testing.store_contract``.
"""

from contextfold.store.base import Store
from contextfold.store.ram import RAMStore
from contextfold.store.registry import open_store, register_store
from contextfold.store.sqlite import SQLiteStore

__all__ = ["RAMStore", "SQLiteStore", "Store", "open_store", "register_store"]
