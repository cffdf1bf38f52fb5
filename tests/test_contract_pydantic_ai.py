"""The adapter contract on the Pydantic AI adapter (``contract_pydantic_ai``)."""

from __future__ import annotations

import pytest
from contract_pydantic_ai import PydanticAITurns

from contextfold.testing.adapter_contract import AdapterContract, OpenAdapter


class TestPydanticAI(AdapterContract):
    """``ContextfoldHistory`` keeps every promise, on a SQLite file."""

    @pytest.fixture
    def adapter(self) -> OpenAdapter:
        return PydanticAITurns
