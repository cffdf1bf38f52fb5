"""The adapter contract on ``ContextfoldMiddleware`` (LangChain v1 / LangGraph), on a SQLite file
and on RAM."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("langchain")

from contract_langchain import LangChainTurns

from contextfold.testing.adapter_contract import AdapterContract, OpenAdapter


class TestLangChainMiddleware(AdapterContract):
    @pytest.fixture
    def adapter(self) -> OpenAdapter:
        return LangChainTurns

    @pytest.fixture(params=["sqlite", "ram"])
    def store_url(self, request: pytest.FixtureRequest, tmp_path: Path) -> str:
        if request.param == "ram":
            return "memory://"
        return f"sqlite://{(tmp_path / 'contract.db').resolve()}"
