"""Property tests: every preset keeps render's promises on random valid conversations.

For each preset (the model-free ones, and the model presets both on the
offline stand-in and on a scripted model answering each strategy's form), a
random conversation (``strategies_conv``) is appended in batches to a RAM
store and to a SQLite file, compacted after each batch at a random budget,
and rendered. Then:

- ``floor``: render raises ``BudgetError`` exactly when the budget is below the
  system prompt plus the latest user message (counted here), and works above;
- ``budget``: the prompt is within the budget by an independent count
  (``prompt_checks``);
- ``system_first``: the system prompt opens the prompt, as logged;
- ``latest_user``: the latest user message is in the prompt verbatim;
- ``pairing``: no orphan tool message and no unanswered tool call;
- ``anthropic``: ``to_anthropic`` of the prompt opens with a user turn, roles
  alternate, and each tool result answers a call of the turn before;
- ``history``: ``history()`` is exactly what was appended, in both stores;
- ``copies``: editing what ``history()`` or ``render()`` returned edits nothing;
- ``deterministic``: both stores, and a fresh process-side open of the SQLite
  file, render the same prompt;
- ``below_floor``: ``compact()`` at a budget below that floor commits no fold.

Profiles (``CONTEXTFOLD_HYPOTHESIS``): ``default`` runs ``DEFAULT_EXAMPLES``
examples a case, derandomized (the same examples on every run, so CI is
deterministic) and with no example database; ``long`` runs ``LONG_EXAMPLES``
a case, randomized (``bench/properties.py`` runs it; ``--quick``: ``quick``, 2 a case,
derandomized);
``CONTEXTFOLD_HYPOTHESIS_EXAMPLES`` sets another number a case.

"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from prompt_checks import anthropic_faults, message_tokens, pairing_faults, prompt_tokens
from strategies_conv import Conversation, budgets, conversations

from contextfold import Memory
from contextfold.core.errors import BudgetError, InvalidInput
from contextfold.core.messages import for_model
from contextfold.formats.anthropic import to_anthropic
from contextfold.llm.base import Completion
from contextfold.strategies.presets import preset_names
from contextfold.testing import ScriptedModel

PROFILE = os.environ.get("CONTEXTFOLD_HYPOTHESIS", "default")
DEFAULT_EXAMPLES, LONG_EXAMPLES = 6, 400
EXAMPLES = int(
    os.environ.get("CONTEXTFOLD_HYPOTHESIS_EXAMPLES")
    or {"default": DEFAULT_EXAMPLES, "long": LONG_EXAMPLES, "quick": 2}[PROFILE]
)
BASE = settings(
    deadline=None,
    database=None,
    derandomize=PROFILE != "long",
    print_blob=True,
    # Shrinking these examples can take minutes; a failure prints its blob to replay.
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    + ([Phase.shrink] if os.environ.get("CONTEXTFOLD_HYPOTHESIS_SHRINK") else []),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EXAMPLES_RUN: dict[str, int] = {}  # case -> examples, read by bench/properties.py

MODEL_FREE = ("offline", "keep-recent", "disabled")
# Options that make each preset fold within a few turns; the defaults are drawn too.
EAGER: dict[str, dict[str, Any]] = {
    "offline": {"keep_last": 1},
    "round-compressor": {"rounds_to_compress": 1, "rounds_to_retain": 1},
    "rolling": {"threshold": 2, "retain_recent": 1},
    "taskweaver": {"threshold": 2, "retain_recent": 1},
    "tool-calls": {"keep_recent": 1, "batch_size": 2},
    "threshold": {"threshold": 0.3, "keep_recent": 1, "min_tokens": 10},
    "goal-batch": {"min_turns_old_threshold": 2, "min_turns_to_compact": 1},
    "adr-0041": {
        "tool_calls": {"keep_recent": 1, "batch_size": 2},
        "threshold": {"threshold": 0.3, "keep_recent": 1, "min_tokens": 10},
        "goal_batch": {"min_turns_old_threshold": 2, "min_turns_to_compact": 1},
    },
    "token-budget": {"keep_tokens": 200, "threshold_tokens": 300},
    "chat": {"keep_tokens": 200, "threshold_tokens": 300},
    "whole-history": {"max_messages": 4, "keep_last": 2},
    "retrieve-facts": {"max_messages": 4, "keep_last": 2},
    "code-agent": {"max_messages": 4, "keep_last": 2},
}
CASES = [(p, "none") for p in preset_names()] + [
    (p, "scripted") for p in preset_names() if p not in MODEL_FREE
]


class FormModel(ScriptedModel):
    """A scripted model that answers every strategy in the form it asks: JSON filled
    by the schema's types when a schema is given, a short summary otherwise."""

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        self.add(SUMMARY if schema is None else filled(schema))
        return super().complete(messages, max_tokens=max_tokens, schema=schema)  # type: ignore[arg-type]


MARKER = "[contextfold: 999999999 earlier messages left out to fit the token budget]"
SUMMARY = "The user asked for a fix and the agent read the files and ran the tests."


def filled(schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {"note": {"type": "string"}}
        return {key: filled(sub) for key, sub in props.items()}
    if kind == "array":
        return [filled(schema.get("items") or {"type": "string"})]
    return SUMMARY


@dataclass
class Run:
    """What one store made of a conversation."""

    prompt: list[dict[str, Any]] | None
    error: BaseException | None
    history: list[dict[str, Any]]
    below_floor_folds: int = 0
    copies: list[str] = field(default_factory=list)
    reopened: list[dict[str, Any]] | None = None


def floor_of(conv: Conversation) -> int:
    system = {"role": "system", "content": conv.system}
    return prompt_tokens([system]) + message_tokens(for_model(conv.latest_user()))


def build(
    conv: Conversation,
    preset: str,
    model: str,
    options: dict[str, Any],
    budget: int,
    path: Any,
) -> Run:
    memory = Memory(path)
    session = memory.session("s", system=conv.system)
    llm = FormModel(name="form") if model == "scripted" else None
    view = session.view("v", preset=preset, budget=budget, llm=llm, **options)
    # Folds committed by a compact() at a budget below the floor of the moment.
    grown = 0
    appended: list[dict[str, Any]] = []
    for batch in [*conv.batches(), []]:  # the last compact() follows no new batch
        session.extend(copy.deepcopy(batch))
        appended.extend(batch)
        below = budget < floor_of(Conversation(conv.system, appended, ()))
        before = len(view.folds(include_superseded=True))
        # A clear error is one allowed answer to a budget below the floor.
        with contextlib.suppress(BudgetError):
            view.compact()
        if below:
            grown += len(view.folds(include_superseded=True)) - before
    try:
        prompt: list[dict[str, Any]] | None = copy.deepcopy(view.render())
        error = None
    except BudgetError as exc:
        prompt, error = None, exc
    run = Run(prompt, error, copy.deepcopy(session.history()), below_floor_folds=grown)
    # Editing what was handed out must not edit the log or the next prompt.
    handed = session.history()
    for m in handed:
        m["content"] = "EDITED"
        m.pop("tool_calls", None)
    if session.history() != run.history:
        run.copies.append("editing history() edited the log")
    if prompt is not None:
        again = view.render()
        for m in again:
            m["content"] = "EDITED"
        if session.history() != run.history or view.render() != prompt:
            run.copies.append("editing render() edited the log or the next prompt")
    memory.close()
    if path is not None:
        with Memory(path) as fresh:
            try:
                run.reopened = fresh.session("s").view("v", llm=llm).render()
            except BudgetError:
                run.reopened = None
    return run


def violations(conv: Conversation, budget: int, runs: Sequence[Run]) -> dict[str, str]:
    """Each broken property, by name, with what broke it."""
    floor = floor_of(conv)
    system = {"role": "system", "content": conv.system}
    appended = [system, *conv.messages]
    out: dict[str, str] = {}
    for label, run in zip(("ram", "sqlite"), runs, strict=False):
        if run.history != appended:
            out["history"] = f"{label}: history() differs from what was appended"
        if run.copies:
            out["copies"] = f"{label}: {run.copies}"
        if run.below_floor_folds:
            out["below_floor"] = f"{label}: {run.below_floor_folds} folds below the floor"
        if (budget < floor) != (run.prompt is None):
            out["floor"] = f"{label}: budget {budget}, floor {floor}, got {run.error!r}"
        prompt = run.prompt
        if prompt is None:
            continue
        used = prompt_tokens(prompt)
        if used > budget:
            out["budget"] = f"{label}: {used} tokens for a budget of {budget}"
        if not prompt or prompt[0] != for_model(system):
            out["system_first"] = f"{label}: prompt opens with {prompt[:1]}"
        if for_model(conv.latest_user()) not in prompt:
            out["latest_user"] = f"{label}: the latest user message is not in the prompt"
        faults = pairing_faults(prompt)
        if faults:
            out["pairing"] = f"{label}: {faults}"
        anthropic = anthropic_faults(*to_anthropic(prompt))
        if anthropic:
            out["anthropic"] = f"{label}: to_anthropic gives {anthropic}"
    if len(runs) == 2 and not runs[0].prompt == runs[1].prompt == runs[1].reopened:
        out["deterministic"] = "RAM, SQLite and a reopened SQLite file render differently"
    return out


@st.composite
def scenarios(draw: st.DrawFn, preset: str) -> tuple[Conversation, int, dict[str, Any], bool]:
    """A conversation, a budget, the preset's options, and whether SQLite runs it
    too (every other example: it costs a file)."""
    conv = draw(conversations())
    floor = floor_of(conv)
    whole = prompt_tokens([{"role": "system", "content": conv.system}, *conv.messages])
    budget = draw(budgets(floor, whole))
    options = draw(st.sampled_from([{}, EAGER.get(preset, {})]))
    return conv, budget, options, draw(st.booleans())


def check(preset: str, model: str, case: str) -> Any:
    """A hypothesis test of every property of ``preset``."""

    @given(scenarios(preset))
    def test(scenario: tuple[Conversation, int, dict[str, Any], bool]) -> None:
        EXAMPLES_RUN[case] = EXAMPLES_RUN.get(case, 0) + 1
        conv, budget, options, on_sqlite = scenario
        runs = [build(conv, preset, model, options, budget, None)]
        if on_sqlite:
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(build(conv, preset, model, options, budget, Path(tmp) / "s.db"))
        broken = violations(conv, budget, runs)
        assert not broken, broken

    return test


@pytest.mark.parametrize(("preset", "model"), CASES)
def test_preset_keeps_its_promises(preset: str, model: str) -> None:
    case = f"{preset}/{model}"
    settings(BASE, max_examples=EXAMPLES)(check(preset, model, case))()


def _disabled_view(conv: Conversation, messages: list[dict[str, Any]], budget: int) -> Any:
    session = Memory().session("s", system=conv.system)
    session.extend(copy.deepcopy(messages))
    return session.view("v", preset="disabled", budget=budget)


@settings(BASE, max_examples=EXAMPLES)
@given(conversations(max_turns=3), st.integers(0, 40))
def test_refusal_is_counted(conv: Conversation, slack: int) -> None:
    EXAMPLES_RUN["refusal"] = EXAMPLES_RUN.get("refusal", 0) + 1
    refusal = {"role": "assistant", "content": "", "refusal": "I can't help with that. " * 60}
    ask = {"role": "user", "content": "Then summarize the file instead."}
    messages = [*conv.messages, refusal, ask]
    system = {"role": "system", "content": conv.system}
    floor = prompt_tokens([system]) + message_tokens(ask)
    uncounted = message_tokens({**refusal, "refusal": None})
    budget = floor + uncounted + 60 + slack  # room for it and a marker, not for its refusal
    prompt = _disabled_view(conv, messages, budget).render()
    assert prompt_tokens(prompt) <= budget


@settings(BASE, max_examples=EXAMPLES)
@given(conversations(max_turns=3))
def test_unanswered_call_is_refused_or_repaired(conv: Conversation) -> None:
    EXAMPLES_RUN["unanswered"] = EXAMPLES_RUN.get("unanswered", 0) + 1
    call = {"id": "call_x", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    dangling = {"role": "assistant", "content": None, "tool_calls": [call]}
    messages = [*conv.messages, dangling, {"role": "user", "content": "Stop, do this instead."}]
    try:
        view = _disabled_view(conv, messages, 10**6)
    except InvalidInput:
        return  # refused at the boundary: one allowed answer
    assert not pairing_faults(view.render())


@settings(BASE, max_examples=EXAMPLES)
@given(conversations(max_turns=3), st.integers(0, 20))
def test_anthropic_first_turn_is_user(conv: Conversation, slack: int) -> None:
    """A cut just before the previous answer: the prompt's first turn after the marker."""
    EXAMPLES_RUN["anthropic"] = EXAMPLES_RUN.get("anthropic", 0) + 1
    answer = {"role": "assistant", "content": "Done."}
    ask = {"role": "user", "content": "Next?"}
    big = {"role": "user", "content": "alpha bravo " * 150}
    messages = [*conv.messages, big, answer, ask]
    system = {"role": "system", "content": conv.system}
    marker = {"role": "system", "content": MARKER}
    room = message_tokens(answer) + message_tokens(marker)
    budget = prompt_tokens([system]) + message_tokens(ask) + room + slack
    prompt = _disabled_view(conv, messages, budget).render()
    assert not anthropic_faults(*to_anthropic(prompt))
