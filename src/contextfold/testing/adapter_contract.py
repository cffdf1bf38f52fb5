"""The adapter contract as pytest tests, shipped so that any framework adapter can prove itself.

An adapter puts contextfold between a framework's agent loop and its model: the
loop's messages go to the log, once each, and the model gets the view's
compacted prompt. A test drives the adapter through ``AdapterTurns``, a small
driver the adapter's author writes around the framework's own types, and
subclasses ``AdapterContract`` with an ``adapter`` fixture that opens one::

    import pytest
    from contextfold.testing.adapter_contract import AdapterContract

    class TestMyAdapter(AdapterContract):
        @pytest.fixture
        def adapter(self):
            return MyTurns          # (memory, session_id, view_name) -> AdapterTurns

The contract creates the session (with its system prompt) and configures the
view before it opens the adapter; it forces folds by compacting the view
between steps, then checks every prompt the adapter gives. ``store_url``
names the store (a SQLite file by default; override it for another backend,
``"memory://"`` for RAM, where the second-process case is skipped).
``LibraryTurns`` is the reference driver: the library itself, as an adapter
should behave.

Run it with ``pytest``; for detailed assertion messages add
``pytest.register_assert_rewrite("contextfold.testing.adapter_contract")`` to
your ``conftest.py``. This module needs pytest; ``contextfold.testing`` itself
does not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import pytest

from contextfold.core.messages import Message
from contextfold.formats.checks import prompt_faults
from contextfold.memory.session import Memory, Session
from contextfold.testing.adapter_contract_checks import prompt_tokens, split_pairs
from contextfold.testing.adapter_contract_conversations import SYSTEM_PROMPT, agent_steps

SESSION = "contract"
VIEW = "agent"
BUDGET = 1800


class AdapterTurns(Protocol):
    """A test's handle on one adapter, over one session and view."""

    def add(self, messages: Sequence[Message]) -> None:
        """The framework's loop gives the adapter these new chat messages (converted to the
        framework's own types, handed over the way the framework does: whole-history
        resend, put per message, add_items...)."""

    def prompt(self) -> list[Message]:
        """What the adapter now hands the model, converted back to chat-format messages."""

    def close(self) -> None: ...


OpenAdapter = Callable[[Memory, str, str], AdapterTurns]
"""Given a Memory, a session id and a view name (the view already configured), open the adapter."""


class LibraryTurns:
    """The reference driver: the library itself, resending the whole conversation.

    Each ``add`` extends the conversation the framework holds and hands all of
    it over; the log gets what is new after the branch it continues, and
    ``prompt`` renders that branch.
    """

    def __init__(self, memory: Memory, session_id: str, view: str) -> None:
        self.session = memory.session(session_id)
        self.view = view
        self.conversation: list[Message] = []
        self.head = 0

    def add(self, messages: Sequence[Message]) -> None:
        fresh = [dict(m) for m in messages]
        self.conversation += fresh
        if not self.head:
            logged = self.session.history()
            if fresh[:1] == logged[:1]:
                fresh = fresh[1:]
            self.head = self.session.last_seq()
        added = self.session.extend(fresh, parent=self.head)
        if added:
            self.head = added[-1].seq

    def prompt(self) -> list[Message]:
        return self.session.view(self.view).render(branch=self.head or None)

    def close(self) -> None:
        """Nothing to release: the Memory belongs to the test."""


def prompt_problems(prompt: Sequence[Message], budget: int, *, open_tail: bool = True) -> list[str]:
    """Everything wrong with one prompt an adapter gave, in words (empty: nothing)."""
    problems = [f"{f.field} at {f.index}: {f.reason}" for f in prompt_faults(prompt, "openai")]
    problems += split_pairs(prompt, open_tail=open_tail)
    if not prompt or prompt[0] != {"role": "system", "content": SYSTEM_PROMPT}:
        first = prompt[0] if prompt else None
        problems.append(f"the system prompt is not first, verbatim: {first!r:.200}")
    spent = prompt_tokens(prompt)
    if spent > budget:
        problems.append(f"{spent} tokens by an independent count, over the budget of {budget}")
    return problems


class AdapterContract:
    """Every promise an adapter keeps, as a test; subclass with an ``adapter`` fixture."""

    budget = BUDGET

    @pytest.fixture
    def adapter(self) -> OpenAdapter:
        """Override: the callable opening your adapter (see ``OpenAdapter``)."""
        raise NotImplementedError("subclass AdapterContract with an adapter fixture")

    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        """The store the contract runs on; another process must open it by this URL."""
        return f"sqlite://{(tmp_path / 'contract.db').resolve()}"

    @pytest.fixture
    def memory(self, store_url: str) -> Iterator[Memory]:
        with Memory(store_url) as opened:
            yield opened

    def opened(self, memory: Memory, **view_settings: object) -> Session:
        """The session with its system prompt, and the view configured (offline folds by default)."""
        session = memory.session(SESSION, system=SYSTEM_PROMPT)
        settings: dict[str, object] = {"preset": "offline", "budget": self.budget}
        settings.update(view_settings)
        session.view(VIEW, **settings)  # type: ignore[arg-type]
        return session

    def run(
        self, turns: AdapterTurns, session: Session, steps: Sequence[Sequence[Message]]
    ) -> list[list[Message]]:
        """Each step added, the view compacted, the prompt taken: every prompt given."""
        prompts = []
        for step in steps:
            turns.add(step)
            session.view(VIEW).compact()
            prompts.append(turns.prompt())
        return prompts

    def test_tool_pairs_never_split(self, adapter: OpenAdapter, memory: Memory) -> None:
        session = self.opened(memory)
        turns = adapter(memory, SESSION, VIEW)
        try:
            prompts = self.run(turns, session, agent_steps(14, seed=11))
        finally:
            turns.close()
        folded = session.view(VIEW).folds(include_superseded=True)
        assert len(folded) >= 5, f"the run was meant to fold many times, folded {len(folded)}"
        for i, prompt in enumerate(prompts):
            assert prompt_problems(prompt, self.budget, open_tail=False) == [], f"prompt {i}"

    def test_system_prompt_kept(self, adapter: OpenAdapter, memory: Memory) -> None:
        session = self.opened(memory)
        turns = adapter(memory, SESSION, VIEW)
        try:
            prompts = self.run(turns, session, agent_steps(10, seed=5))
        finally:
            turns.close()
        assert session.view(VIEW).folds(), "the run was meant to fold"
        for i, prompt in enumerate(prompts):
            system = {"role": "system", "content": SYSTEM_PROMPT}
            assert prompt[:1] == [system], f"prompt {i} does not start with the system prompt"
            assert prompt.count(system) == 1, f"prompt {i} repeats the system prompt"
