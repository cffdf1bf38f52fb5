"""The in-memory backend: the reference every other backend is checked against."""

from contextfold.store.ram.store import RAMStore

__all__ = ["RAMStore"]
