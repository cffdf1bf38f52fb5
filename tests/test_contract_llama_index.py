"""The adapter contract on the LlamaIndex memory, on a SQLite file and in RAM."""

from __future__ import annotations

from pathlib import Path

import pytest
from contract_llama_index import LlamaIndexTurns

from contextfold.testing.adapter_contract import AdapterContract, OpenAdapter


class TestLlamaIndexMemory(AdapterContract):
    """``ContextfoldMemory`` keeps every promise the contract states."""

    @pytest.fixture
    def adapter(self) -> OpenAdapter:
        return LlamaIndexTurns

    @pytest.fixture(params=["sqlite", "ram"])
    def store_url(self, request: pytest.FixtureRequest, tmp_path: Path) -> str:
        if request.param == "ram":
            return "memory://"
        return f"sqlite://{(tmp_path / 'contract.db').resolve()}"
