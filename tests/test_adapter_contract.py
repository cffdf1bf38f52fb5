"""The adapter contract on the reference driver, the library itself, over every backend;
and each case failing on a driver broken in the way it guards against."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pg
import pytest

from contextfold import Memory, ModelError
from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
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


class SplitsPairs(LibraryTurns):
    """Drops the first tool result of each prompt, as a trimming framework would."""

    def prompt(self) -> list[Message]:
        prompt = super().prompt()
        first = next((i for i, m in enumerate(prompt) if m["role"] == "tool"), None)
        return prompt if first is None else prompt[:first] + prompt[first + 1 :]


class FoldsWaitingCalls(LibraryTurns):
    """Leaves out a call that waits for results, as if it were done with."""

    def prompt(self) -> list[Message]:
        prompt = super().prompt()
        return prompt[:-1] if prompt[-1].get("tool_calls") else prompt


class DropsSystem(LibraryTurns):
    """Keeps the system prompt apart once the view has folded (as instructions elsewhere)."""

    def prompt(self) -> list[Message]:
        prompt = super().prompt()
        return prompt[1:] if self.session.view(self.view).folds() else prompt


class AddsUncounted(LibraryTurns):
    """Adds its own instructions after rendering, outside the view's budget."""

    def prompt(self) -> list[Message]:
        note = {"role": "user", "content": "Remember to be thorough. " * 40}
        return [*super().prompt(), note]


class LogsResent(LibraryTurns):
    """Logs what the framework re-sends each turn: its last message again after a user's."""

    def add(self, messages: Sequence[Message]) -> None:
        if self.conversation and messages and messages[-1]["role"] == "user":
            messages = [*messages, {"role": "user", "content": messages[-1]["content"]}]
        super().add(messages)


class KeepsItsPrompt(LibraryTurns):
    """Renders once a user turn and keeps that prompt for the turn: stale elsewhere."""

    kept: list[Message] | None = None

    def add(self, messages: Sequence[Message]) -> None:
        super().add(messages)
        if any(m["role"] == "user" for m in messages):
            self.kept = None

    def prompt(self) -> list[Message]:
        if self.kept is None:
            self.kept = super().prompt()
        return self.kept


class SummarizesItself(LibraryTurns):
    """Summarizes the middle of the prompt itself with the view's model, letting its
    failure out."""

    def prompt(self) -> list[Message]:
        prompt = super().prompt()
        model = self.session.view(self.view).model()
        if model is None or len(prompt) < 8:
            return prompt
        summary = model.complete(prompt[1:-4]).text
        return [prompt[0], {"role": "system", "content": summary}, *prompt[-4:]]


class DropsBadMessages(LibraryTurns):
    """Drops a message it cannot take instead of saying which field is wrong."""

    def add(self, messages: Sequence[Message]) -> None:
        try:
            super().add(messages)
        except InvalidInput:
            super().add(messages[:-1])


Case = Callable[[AdapterContract, OpenAdapter, Memory, str], None]
CASES: dict[str, tuple[type[LibraryTurns], Case, str]] = {
    "pairs": (SplitsPairs, lambda c, a, m, u: c.test_tool_pairs_never_split(a, m), "no result"),
    "pending": (
        FoldsWaitingCalls,
        lambda c, a, m, u: c.test_pending_and_approval_calls_never_folded(a, m),
        "waiting call",
    ),
    "system": (DropsSystem, lambda c, a, m, u: c.test_system_prompt_kept(a, m), "system prompt"),
    "budget": (
        AddsUncounted,
        lambda c, a, m, u: c.test_budget_held_by_an_independent_count(a, m),
        "over the budget",
    ),
    "log": (LogsResent, lambda c, a, m, u: c.test_raw_log_unchanged(a, m), "too many"),
    "second process": (
        KeepsItsPrompt,
        lambda c, a, m, u: c.test_second_process_sees_the_same_view(a, m, u, False),
        "another process renders another prompt",
    ),
    "failing summarizer": (
        SummarizesItself,
        lambda c, a, m, u: c.test_failing_summarizer_never_breaks_the_turn(a, m),
        "the summarizer is down",
    ),
    "bad input": (
        DropsBadMessages,
        lambda c, a, m, u: c.test_bad_input_names_the_field(a, m, {"role": "user"}, "content"),
        "DID NOT RAISE",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_fails_on_a_driver_broken_its_way(case: str, tmp_path: Path) -> None:
    broken, run, says = CASES[case]
    url = f"sqlite://{(tmp_path / 'broken.db').resolve()}"
    caught: Any
    failed = (AssertionError, ModelError, pytest.fail.Exception)
    with Memory(url) as memory, pytest.raises(failed) as caught:
        run(AdapterContract(), broken, memory, url)
    assert says in str(caught.value), f"failed for another reason: {caught.value}"
