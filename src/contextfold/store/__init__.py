"""Stores: one protocol, one module per backend, one contract test suite."""

from contextfold.store.base import Store
from contextfold.store.memory import MemoryStore

__all__ = ["MemoryStore", "Store"]
