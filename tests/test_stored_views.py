"""Views are records: stored with the session, rebuilt by name in any handle or process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from test_cycle import chat

from contextfold import InvalidInput, Memory, ViewConfig, ViewConflict
from contextfold.memory import config
from contextfold.memory.config import SETTINGS
from contextfold.memory.filters import compile_filter
from contextfold.strategies import (
    DEFAULT_PRESET,
    ExtractiveSummary,
    MessageCount,
    ObservationMasking,
    OverBudget,
    Pipeline,
    Predicate,
    Tokens,
    WholeHistory,
    get_preset,
    preset_names,
)
from contextfold.strategies.base import HIGH_WATER, LOW_WATER
from contextfold.strategies.registry import pipeline_from_data, pipeline_to_data
from contextfold.testing import ScriptedModel

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_survives_a_round_trip_as_data(name: str) -> None:
    pipeline = get_preset(name)
    data = pipeline_to_data(pipeline)
    assert json.loads(json.dumps(data)) == data
    again = pipeline_from_data(data)
    assert again.name == pipeline.name
    assert list(again.strategies) == list(pipeline.strategies)


def test_a_view_reopened_by_name_in_a_new_memory_is_the_same_view(tmp_path: Path) -> None:
    db = tmp_path / "views.db"
    first = Memory(db).session("s", system="Be brief.")
    first.extend(chat(12))
    view = first.view("planner", preset="offline", budget=900, keep_last=2)
    view.compact()
    prompt = view.render()
    again = Memory(db).session("s").view("planner")
    assert again.budget == 900
    assert repr(again.pipeline) == repr(view.pipeline)
    assert again.config == view.config
    assert again.render() == prompt
    assert Memory(db).session("s").views() == ["planner"]


def test_a_view_reopened_in_another_process_renders_and_compacts_the_same(tmp_path: Path) -> None:
    db = tmp_path / "views.db"
    session = Memory(db).session("s", system="Be brief.")
    session.extend(chat(12))
    view = session.view("v", preset="offline", budget=900)
    script = textwrap.dedent(
        f"""
        import json
        from contextfold import Memory
        view = Memory({str(db)!r}).session("s").view("v")
        report = view.compact()
        print(json.dumps({{"folds": len(report.folds), "prompt": view.render()}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    child = json.loads(out.stdout)
    assert child["folds"] > 0
    assert view.render() == child["prompt"]


def test_changing_a_view_is_an_explicit_versioned_update() -> None:
    session = Memory().session("s")
    view = session.view("v", preset="offline", budget=1000)
    assert view.version == 1
    session.view("v", budget=2000)
    assert (view.version, view.budget, view.config.preset) == (2, 2000, "offline")
    session.view("v", budget=2000)
    assert view.version == 2, "an update that changes nothing stores nothing"
    with pytest.raises(ViewConflict):
        view.update(budget=3000, expected_version=1)
    assert view.budget == 2000
    view.update(budget=3000, expected_version=2)
    assert (view.version, view.budget) == (3, 3000)


def test_python_code_cannot_be_stored_and_the_error_names_the_field() -> None:
    session = Memory().session("s")
    with pytest.raises(InvalidInput) as caught:
        session.view("v", pipeline=Pipeline([ExtractiveSummary(trigger=Predicate(bool))]))
    assert caught.value.field == "pipeline.strategies[0].options.trigger"
    with pytest.raises(InvalidInput) as caught:
        session.view("v", pipeline=Pipeline([WholeHistory(predicate=lambda s: True)]))
    assert caught.value.field == "pipeline.strategies[0].options.predicate"
    assert session.views() == []


def test_a_local_pipeline_runs_here_and_is_refused_clearly_elsewhere() -> None:
    memory = Memory()
    session = memory.session("s", system="sys")
    session.extend(chat(6))
    strategy = ExtractiveSummary(trigger=Predicate(lambda s: len(s.entries) > 4), ratio=0.1)
    view = session.view("v", pipeline=Pipeline([strategy]), local=True)
    assert view.compact().folds
    assert view.config.local and view.config.pipeline is None
    elsewhere = Memory(memory.store).session("s").view("v")
    with pytest.raises(InvalidInput, match="process-local pipeline") as caught:
        elsewhere.compact()
    assert caught.value.field == "pipeline"
    assert elsewhere.render() == view.render()


# How an earlier version stored a view opened with settings but no preset: no pipeline.
OLD_RECORD = {
    "preset": None,
    "options": {},
    "pipeline": None,
    "budget": 2000,
    "filter": None,
    "model": None,
    "high_water": HIGH_WATER,
    "low_water": LOW_WATER,
    "local": False,
    "recall": None,
}


def test_a_view_stored_without_a_pipeline_reads_as_the_default_preset() -> None:
    memory = Memory()
    session = memory.session("s", system="sys")
    session.extend(chat(40))
    session.store.put_view(session.id, "old", OLD_RECORD)
    view = Memory(memory.store).session("s").view("old")
    assert (view.version, view.config.preset, view.budget) == (1, DEFAULT_PRESET, 2000)
    assert view.config == ViewConfig(preset=DEFAULT_PRESET, budget=2000)
    assert view.compact().folds
    report = view.render_report()
    assert report.tokens <= 2000 and report.omitted == 0  # folded to fit, not cut
    assert session.store.get_view(session.id, "old").config["preset"] is None  # not rewritten
    view.update(budget=1800)
    assert session.store.get_view(session.id, "old").config["preset"] == DEFAULT_PRESET


def test_each_configuration_version_is_built_once_in_a_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    by_preset, by_data = config.get_preset, config.pipeline_from_data

    def preset(name: str, **options: Any) -> Pipeline:
        built.append(name)
        return by_preset(name, **options)

    def data(record: Any) -> Pipeline:
        built.append("data")
        return by_data(record)

    monkeypatch.setattr(config, "get_preset", preset)
    monkeypatch.setattr(config, "pipeline_from_data", data)
    memory = Memory()
    session = memory.session("s", system="sys")
    session.extend(chat(20))
    view = session.view("v", preset="offline", budget=2000)
    for _ in range(2):  # checking, reading, rendering and compacting version 1
        _ = (view.config, view.pipeline, view.state(), view.floor())
        view.render()
        view.compact()
        session.view("v").render()
    assert (view.version, built) == (1, ["offline"])
    view.update(budget=1800)
    view.compact()
    view.render()
    assert (view.version, built) == (2, ["offline"] * 2)
    view.update(budget=1800)  # changes nothing: no version, nothing built
    session.view("v", budget=1800)
    assert (view.version, built) == (2, ["offline"] * 2)
    given = session.view("w", pipeline=Pipeline([WholeHistory(trigger=MessageCount(30))]))
    given.render()
    assert built == ["offline"] * 2 + ["data"]  # checked once; the object given runs
    Memory(memory.store).session("s").view("v").render()  # another process's side
    assert built == ["offline"] * 2 + ["data", "offline"]


def test_settings_are_typed_where_they_are_changed() -> None:
    assert set(SETTINGS) == {f.name for f in fields(ViewConfig) if f.init}
    assert set(SETTINGS) == set(ViewConfig().to_data())
    view = Memory().session("s").view("v", budget=500)
    for changes, field in [
        ({"colour": 1}, "colour"),
        ({"options": [1]}, "options"),
        ({"pipeline": "rolling"}, "pipeline"),
        ({"local": "yes"}, "local"),
        ({"preset": 7}, "preset"),
        ({"high_water": True}, "high_water"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            view.update(**changes)
        assert caught.value.field == field
    assert (view.version, view.budget) == (1, 500)
    with pytest.raises(InvalidInput) as caught:
        Memory().session("s").view("v", budget=1).update(budget=True)  # equal, not a budget
    assert caught.value.field == "budget"


def test_triggers_are_stored_as_data_and_rebuilt() -> None:
    session = Memory().session("s")
    trigger = Tokens(3000) | MessageCount(40)
    pipeline = Pipeline(
        [ObservationMasking(trigger=OverBudget(0.8)), WholeHistory(trigger=trigger)]
    )
    view = session.view("v", pipeline=pipeline)
    assert view.config.pipeline is not None
    rebuilt = Memory(session.store).session("s").view("v").pipeline
    assert rebuilt is not None
    assert rebuilt.strategies[1].trigger == trigger  # type: ignore[attr-defined]


def test_bad_records_are_refused_naming_the_field_and_nothing_changes() -> None:
    session = Memory().session("s")
    view = session.view("v", preset="offline", budget=500)
    cases = [
        ({"budget": -1}, "budget"),
        ({"budget": "100"}, "budget"),
        ({"preset": "nope"}, "preset"),
        ({"low_water": 0.95}, "low_water"),
        ({"filter": {"colour": "red"}}, "filter.colour"),
        ({"model": ""}, "model"),
    ]
    for changes, field in cases:
        with pytest.raises(InvalidInput) as caught:
            view.update(**changes)
        assert caught.value.field == field
    with pytest.raises(InvalidInput) as caught:
        ViewConfig.from_data({"pipeline": {"strategies": [{"type": "mystery"}]}})
    assert caught.value.field == "pipeline.strategies[0].type"
    assert (view.version, view.budget) == (1, 500)


def test_declarative_filters_are_stored_and_callables_stay_in_this_process() -> None:
    memory = Memory()
    session = memory.session("s")
    session.extend(
        [
            {"role": "user", "content": "plan it"},
            {
                "role": "assistant",
                "name": "Planner",
                "content": "to coder",
                "meta": {"send_to": "Coder"},
            },
            {
                "role": "assistant",
                "name": "Coder",
                "content": "done",
                "meta": {"send_to": "Planner"},
            },
            {"role": "assistant", "name": "Coder", "content": "talking to myself"},
        ]
    )
    spec = {"any": [{"role": "user"}, {"name": "Planner"}, {"meta": {"send_to": "Planner"}}]}
    view = session.view("planner", filter=spec)
    assert [m["content"] for m in view.render()] == ["plan it", "to coder", "done"]
    assert Memory(memory.store).session("s").view("planner").render() == view.render()
    local = session.view("coder", filter=lambda m: m.get("name") != "Planner")
    assert len(local.render()) == 3
    assert local.config.filter is None
    assert len(Memory(memory.store).session("s").view("coder").render()) == 4


def test_filter_language() -> None:
    keep = compile_filter({"not": {"role": ["tool", "system"]}, "meta": {"lang": ["en", "fr"]}})
    assert keep({"role": "user", "content": "", "meta": {"lang": "fr"}})
    assert not keep({"role": "user", "content": "", "meta": {"lang": "de"}})
    assert not keep({"role": "tool", "content": "", "meta": {"lang": "en"}})


def test_a_model_object_is_process_local_and_a_model_string_is_stored() -> None:
    memory = Memory()
    session = memory.session("s")
    scripted = ScriptedModel(default="short")
    view = session.view("v", preset="rolling", llm=scripted)
    assert view.model() is scripted and view.config.model is None
    stored = session.view("w", preset="rolling", model="offline")
    assert stored.config.model == "offline"
    assert Memory(memory.store).session("s").view("w").model() is not None


def test_forgetting_a_view_drops_only_this_process_side_and_keeps_what_is_stored() -> None:
    memory = Memory()
    session = memory.session("s", system="sys")
    model = ScriptedModel([])
    view = session.view("v", preset="offline", budget=500, llm=model)
    session.append({"role": "user", "content": "hello"})
    before = view.render()
    memory.forget("s", "v")
    again = session.view("v")
    assert again.binding is not view.binding
    assert (
        again.binding.configuration.llm is None
    )  # the bound object lived only in the forgotten binding
    assert again.config == view.config
    assert again.render() == before
