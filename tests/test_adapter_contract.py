"""The adapter contract on the reference driver, the library itself, over every backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pg
import pytest

from contextfold.testing.adapter_contract import AdapterContract, LibraryTurns, OpenAdapter


class TestLibrary(AdapterContract):
    """``LibraryTurns`` keeps every promise, on RAM, a SQLite file and PostgreSQL."""

    @pytest.fixture
    def adapter(self) -> OpenAdapter:
        return LibraryTurns

    @pytest.fixture(params=["ram", "sqlite", "postgres"])
    def store_url(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
        if request.param == "ram":
            yield "memory://"
        elif request.param == "sqlite":
            yield f"sqlite://{(tmp_path / 'contract.db').resolve()}"
        else:
            pg.require_postgres()
            with pg.fresh_schema() as schema:
                yield pg.url(schema)
