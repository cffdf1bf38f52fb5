"""The adapter contract on the OpenAI Agents SDK session, on a SQLite file and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pg
import pytest

from contextfold.testing.adapter_contract import AdapterContract, OpenAdapter

pytest.importorskip("agents")


class TestOpenAIAgentsSession(AdapterContract):
    """``ContextfoldSession`` keeps every promise, driven through ``add_items``/``get_items``."""

    @pytest.fixture
    def adapter(self) -> OpenAdapter:
        from contract_openai_agents import AgentsSessionTurns

        return AgentsSessionTurns

    @pytest.fixture(params=["sqlite", "postgres"])
    def store_url(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
        if request.param == "sqlite":
            yield f"sqlite://{(tmp_path / 'contract.db').resolve()}"
        else:
            pg.require_postgres()
            with pg.fresh_schema() as schema:
                yield pg.url(schema)
