"""What the preset table says (``describe_presets``) is what the presets do."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import pytest

from contextfold import Memory
from contextfold.llm.base import Completion
from contextfold.llm.offline import OfflineModel
from contextfold.strategies import (
    DEFAULT_PRESET,
    KeepRecent,
    Pipeline,
    describe_presets,
    preset_names,
    register_preset,
)
from contextfold.strategies import presets as registry

# The first 70 messages of the shipped coding-agent session: about 18k tokens.
SESSION = json.loads(files("contextfold").joinpath("data/demo_session.json").read_text())[:70]
INFO = {p.name: p for p in describe_presets()}


@dataclass
class CountingModel(OfflineModel):
    """The offline stand-in, counting the calls a pipeline makes."""

    calls: int = 0

    def complete(self, messages: Any, **options: Any) -> Completion:
        self.calls += 1
        return super().complete(messages, **options)


def test_every_preset_is_described_in_one_line() -> None:
    assert [p.name for p in describe_presets()] == preset_names()
    for info in describe_presets():
        assert info.description and "\n" not in info.description, info.name
        assert len(info.description) <= 100, info.name


def test_the_default_preset_is_registered_and_needs_no_model() -> None:
    assert DEFAULT_PRESET == "offline"
    assert INFO[DEFAULT_PRESET].model is False


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("name", preset_names())
def test_a_preset_calls_a_model_exactly_when_the_table_says_so(name: str) -> None:
    model = CountingModel()
    session = Memory().session("s")
    session.extend(SESSION)
    view = session.view("v", preset=name, budget=3000, llm=model)
    view.compact()
    assert (model.calls > 0) is INFO[name].model, model.calls
    if name != "disabled":
        assert view.folds(), "the session is six times the budget: something must fold"


def test_a_third_party_preset_is_described_by_its_docstring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_PRESETS", dict(registry._PRESETS))

    def newest_only() -> Pipeline:
        """Keep the newest messages.

        Longer notes stay out of the table."""
        return Pipeline([KeepRecent()], name="newest-only")

    register_preset("newest-only", newest_only)
    register_preset("quiet", newest_only, description="Says less.", model=False)
    found = {p.name: p for p in describe_presets()}
    assert (found["newest-only"].description, found["newest-only"].model) == (
        "Keep the newest messages.",
        True,
    )
    assert (found["quiet"].description, found["quiet"].model) == ("Says less.", False)
