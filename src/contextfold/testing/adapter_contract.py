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

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

import pytest

from contextfold.core.errors import InvalidInput, ModelError
from contextfold.core.messages import Message
from contextfold.formats.checks import prompt_faults
from contextfold.memory.session import Memory, Session
from contextfold.runtime.cooldown import Cooldown
from contextfold.runtime.inline import InlineRunner
from contextfold.testing import ScriptedModel
from contextfold.testing.adapter_contract_checks import (
    log_faults,
    prompt_tokens,
    seen,
    split_pairs,
)
from contextfold.testing.adapter_contract_conversations import (
    SYSTEM_PROMPT,
    agent_steps,
    tool_call,
    tool_call_message,
    tool_output,
    tool_result,
)
from contextfold.testing.adapter_contract_elsewhere import failing_endpoint, rendered_elsewhere

SESSION = "contract"
VIEW = "agent"
BUDGET = 1800
SYSTEM = {"role": "system", "content": SYSTEM_PROMPT}


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
    """The reference driver: the library itself, as a framework resending its whole history.

    Each ``add`` extends the conversation the framework holds and records all of
    it (``Session.record``): the log gets only what is new, once, however often
    the rest is sent again, and ``prompt`` renders the branch the conversation
    ends on. A conversation the log refuses is not kept, so the turn can go on.
    """

    def __init__(self, memory: Memory, session_id: str, view: str) -> None:
        self.session = memory.session(session_id)
        self.view = view
        self.conversation: list[Message] = []
        self.head = 0

    def add(self, messages: Sequence[Message]) -> None:
        conversation = self.conversation + [dict(m) for m in messages]
        self.head = self.session.record(conversation).at
        self.conversation = conversation

    def prompt(self) -> list[Message]:
        return self.session.view(self.view).render(branch=self.head or None)

    def close(self) -> None:
        """Nothing to release: the Memory belongs to the test."""


def prompt_problems(prompt: Sequence[Message], budget: int, *, open_tail: bool = True) -> list[str]:
    """Everything wrong with one prompt an adapter gave, in words (empty: nothing).

    With ``open_tail`` the prompt may end with a call still waiting for results (a
    tool running, a human's approval): the provider's checks see it as it will be
    sent, once they come.
    """
    sent = [*prompt, *awaited_results(prompt)] if open_tail else list(prompt)
    problems = [f"{f.field} at {f.index}: {f.reason}" for f in prompt_faults(sent, "openai")]
    problems += split_pairs(prompt, open_tail=open_tail)
    if not prompt or seen(prompt[0]) != SYSTEM:
        first = prompt[0] if prompt else None
        problems.append(f"the system prompt is not first, verbatim: {first!r:.200}")
    spent = prompt_tokens(prompt)
    if spent > budget:
        problems.append(f"{spent} tokens by an independent count, over the budget of {budget}")
    return problems


def awaited_results(prompt: Sequence[Message]) -> list[Message]:
    """A stand-in result for each id of the prompt's last call that has none yet, when
    nothing but its results follows it."""
    last = max((i for i, m in enumerate(prompt) if m.get("tool_calls")), default=None)
    if last is None or any(m.get("role") != "tool" for m in prompt[last + 1 :]):
        return []
    answered = {m.get("tool_call_id") for m in prompt[last + 1 :]}
    waiting = [c["id"] for c in prompt[last]["tool_calls"] if c.get("id") not in answered]
    return [{"role": "tool", "tool_call_id": i, "content": "(awaited)"} for i in waiting]


class AdapterContract:
    """Every promise an adapter keeps, as a test; subclass with an ``adapter`` fixture.

    Each case opens session ``SESSION`` with ``SYSTEM_PROMPT`` and configures view
    ``VIEW`` (the ``offline`` preset, ``budget`` tokens) before it opens the adapter.
    """

    budget = BUDGET
    """The view's budget in most cases: small, so long tool results make it fold often."""

    @pytest.fixture
    def adapter(self) -> OpenAdapter:
        """Override: the callable opening your adapter (see ``OpenAdapter``)."""
        raise NotImplementedError("subclass AdapterContract with an adapter fixture")

    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        """The store the contract runs on; another process opens it by this URL
        (``"memory://"``: RAM, one process only)."""
        return f"sqlite://{(tmp_path / 'contract.db').resolve()}"

    @pytest.fixture
    def memory(self, store_url: str) -> Iterator[Memory]:
        with Memory(store_url) as opened:
            yield opened

    def opened(self, memory: Memory, **view_settings: Any) -> Session:
        """The session with its system prompt, and the view configured (offline folds,
        ``budget``, unless ``view_settings`` say otherwise)."""
        session = memory.session(SESSION, system=SYSTEM_PROMPT)
        settings: dict[str, Any] = {"preset": "offline", "budget": self.budget, **view_settings}
        session.view(VIEW, **settings)
        return session

    def run(
        self,
        turns: AdapterTurns,
        session: Session,
        steps: Sequence[Sequence[Message]],
        *,
        compact: bool = True,
    ) -> list[list[Message]]:
        """Each step added, the view compacted (when ``compact``), the prompt taken:
        every prompt the adapter gave."""
        prompts = []
        for step in steps:
            turns.add(step)
            if compact:
                session.view(VIEW).compact()
            prompts.append(turns.prompt())
        return prompts

    def test_tool_pairs_never_split(self, adapter: OpenAdapter, memory: Memory) -> None:
        session = self.opened(memory)
        with closing(adapter(memory, SESSION, VIEW)) as turns:
            prompts = self.run(turns, session, agent_steps(7, seed=11))
        folded = session.view(VIEW).folds(include_superseded=True)
        assert len(folded) >= 5, f"the run was meant to fold many times, folded {len(folded)}"
        for i, prompt in enumerate(prompts):
            assert prompt_problems(prompt, self.budget, open_tail=False) == [], f"prompt {i}"

    def test_pending_and_approval_calls_never_folded(
        self, adapter: OpenAdapter, memory: Memory
    ) -> None:
        """Three calls at once, one a human's approval: the call stays verbatim while
        results come one by one, and while the view folds around it."""
        session = self.opened(memory)
        view = session.view(VIEW)
        pending = tool_call_message(
            tool_call("call_0", "read_file", {"target": "src/app/loader.py"}),
            tool_call("call_1", "run_command", {"target": "make test"}),
            tool_call("call_2", "approve_deploy", {"target": "production", "reason": "release"}),
        )
        rng = random.Random(3)
        later = [
            [tool_result("call_0", tool_output(rng, "read_file", True)[:1200])],
            [tool_result("call_1", tool_output(rng, "run_command", True)[:1200])],
            [tool_result("call_2", "Approved by the on-call engineer.")],
        ]
        with closing(adapter(memory, SESSION, VIEW)) as turns:
            self.run(turns, session, agent_steps(6, seed=3))
            turns.add([{"role": "user", "content": "Ship the fix to production."}, pending])
            view.compact()
            folds_before = len(view.folds(include_superseded=True))
            tail, budget = [pending], self.budget
            ends_with(turns.prompt(), tail, budget)
            for step, smaller in zip(later, (1600, 1400, 1300), strict=True):
                view.update(budget=smaller)  # the budget shrinks: the view folds around the call
                budget = smaller
                view.compact()
                ends_with(turns.prompt(), tail, budget)
                turns.add(step)
                tail += step
                view.compact()
                ends_with(turns.prompt(), tail, budget)
        folded = len(view.folds(include_superseded=True)) - folds_before
        assert folded >= 2, f"the view was meant to fold while the call waited, folded {folded}"

    def test_system_prompt_kept(self, adapter: OpenAdapter, memory: Memory) -> None:
        session = self.opened(memory)
        with closing(adapter(memory, SESSION, VIEW)) as turns:
            prompts = self.run(turns, session, agent_steps(4, seed=5))
        assert session.view(VIEW).folds(), "the run was meant to fold"
        for i, prompt in enumerate(prompts):
            shown = [seen(m) for m in prompt]
            assert shown[:1] == [SYSTEM], f"prompt {i} does not start with the system prompt"
            assert shown.count(SYSTEM) == 1, f"prompt {i} repeats the system prompt"

    def test_budget_held_by_an_independent_count(
        self, adapter: OpenAdapter, memory: Memory
    ) -> None:
        budget = 1000
        session = self.opened(memory, budget=budget)
        with closing(adapter(memory, SESSION, VIEW)) as turns:
            prompts = self.run(turns, session, agent_steps(5, seed=17, long_share=0.6))
        spent = [prompt_tokens(p) for p in prompts]
        over = [(i, n) for i, n in enumerate(spent) if n > budget]
        assert over == [], f"prompts over the budget of {budget} (index, tokens): {over}"
        assert max(spent) >= budget * 0.75, f"the run never came near the budget: {max(spent)}"

    def test_raw_log_unchanged(self, adapter: OpenAdapter, memory: Memory) -> None:
        """Every message added is logged once, in order, whatever the framework re-sends."""
        session = self.opened(memory)
        steps = agent_steps(5, seed=23, media=True)
        with closing(adapter(memory, SESSION, VIEW)) as turns:
            self.run(turns, session, steps)
            middle = session.history()
            more = agent_steps(3, seed=29)
            more[0] = more[0][1:]  # the system prompt was given once already
            self.run(turns, session, more)
        added = [m for step in [*steps, *more] for m in step]
        assert log_faults(middle, added[: len(middle)]) == []
        assert log_faults(session.history(), added) == []

    @pytest.mark.parametrize("recall", [False, True], ids=["folds", "recall"])
    def test_second_process_sees_the_same_view(
        self, adapter: OpenAdapter, memory: Memory, store_url: str, recall: bool
    ) -> None:
        """Another process renders the branch the adapter is on as the adapter gave it:
        the same folds and, with recall on, the same messages recalled."""
        if store_url.startswith("memory:"):
            pytest.skip("a RAM store lives in one process")
        session = self.opened(memory, recall=recall)
        with closing(adapter(memory, SESSION, VIEW)) as turns:
            prompt = self.run(turns, session, agent_steps(6, seed=31))[-1]
        assert session.view(VIEW).folds(), "the run was meant to fold"
        theirs = rendered_elsewhere(store_url, SESSION, VIEW, session.last_seq())
        mine = [seen(m) for m in prompt]
        differ = [
            i for i, m in enumerate([seen(m) for m in theirs]) if i >= len(mine) or m != mine[i]
        ]
        assert (len(theirs), differ) == (len(prompt), []), (
            f"another process renders another prompt: {len(theirs)} messages, not "
            f"{len(prompt)}; messages {differ} differ"
        )

    def test_failing_summarizer_never_breaks_the_turn(
        self, adapter: OpenAdapter, memory: Memory
    ) -> None:
        """The view's model raises on every call; folds run inside the adapter's own
        appends (an inline runner), so a failure that escaped would break its turn."""
        model = ScriptedModel(default=ModelError("the summarizer is down"), name="down")
        session = self.opened(memory, preset="rolling", llm=model)
        self.run_with_failing_model(adapter, memory, session)
        assert model.calls, "the summarizer was never asked, so it never failed"

    def test_summarizer_answering_500_never_breaks_the_turn(
        self, adapter: OpenAdapter, memory: Memory
    ) -> None:
        """The view's stored model is a server on 127.0.0.1 answering every call with a 500."""
        pytest.importorskip("openai")
        with failing_endpoint() as (url, hits):
            session = self.opened(memory, preset="rolling", model=f"openai-compatible:{url}#down")
            self.run_with_failing_model(adapter, memory, session)
        assert hits, "the summarizer was never asked, so it never failed"

    def run_with_failing_model(
        self, adapter: OpenAdapter, memory: Memory, session: Session
    ) -> None:
        failures: list[str] = []
        runner = InlineRunner(
            on_event=[lambda e: failures.append(e.kind) if e.kind == "failed" else None],
            cooldown=Cooldown(0.0, 0.0),
        )
        runner.watch(session.view(VIEW))
        try:
            with closing(adapter(memory, SESSION, VIEW)) as turns:
                prompts = self.run(turns, session, agent_steps(5, seed=37), compact=False)
        finally:
            runner.stop()
        assert failures, "no compaction failed, so the case showed nothing"
        for i, prompt in enumerate(prompts):
            assert prompt_problems(prompt, self.budget, open_tail=False) == [], f"prompt {i}"
        added = [m for step in agent_steps(5, seed=37) for m in step]
        assert log_faults(session.history(), added) == []

    @pytest.mark.parametrize(
        ("message", "field"),
        [
            ({"role": "user"}, "content"),
            ({"role": "wizard", "content": "abracadabra"}, "role"),
            ({"role": "tool", "content": "no id"}, "tool_call_id"),
            ({"role": "tool", "tool_call_id": "never_called", "content": "orphan"}, "tool_call_id"),
            ({"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}, "tool_calls"),
        ],
    )
    def test_bad_input_names_the_field(
        self, adapter: OpenAdapter, memory: Memory, message: Message, field: str
    ) -> None:
        session = self.opened(memory)
        steps = agent_steps(2, seed=41)
        with closing(adapter(memory, SESSION, VIEW)) as turns:
            self.run(turns, session, steps[:2], compact=False)
            before = session.messages()
            with pytest.raises(InvalidInput) as caught:
                turns.add([{"role": "user", "content": "fine"}, message])
            assert caught.value.field is not None and caught.value.field.startswith(field), (
                f"InvalidInput names {caught.value.field!r}, not {field!r}: {caught.value}"
            )
            assert session.messages() == before, "a refused message changed the log"
            self.run(turns, session, steps[2:], compact=False)  # the turn goes on
        added = [m for step in steps for m in step]
        assert log_faults(session.history(), added) == []


def ends_with(prompt: Sequence[Message], tail: Sequence[Message], budget: int) -> None:
    """``prompt`` is sound and ends with ``tail`` verbatim: a call still waiting and its
    results so far, never folded nor answered for it."""
    problems = prompt_problems(prompt, budget)
    assert problems == [], problems
    got = [seen(m) for m in prompt[-len(tail) :]]
    assert got == [seen(m) for m in tail], (
        f"the waiting call and its results are not the prompt's end: {got!r:.600}"
    )
    assert [seen(m) for m in prompt].count(seen(tail[0])) == 1
