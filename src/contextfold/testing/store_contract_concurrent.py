"""The Store contract's promises under concurrent writers: the rules of
``contextfold.core.order`` hold when two appends race, in threads of one process
and in processes sharing the store by URL.

Part of ``contextfold.testing.store_contract.StoreContract``. Each round makes a
log ending with an assistant call ``c0``, then releases two writers at the same
instant (a barrier): the race of a result and a user message, the race of
two results for the one call, and the race of one request's keys with two and
with three messages (``whole_keys``). Whatever the order they land in, the log
must never hold a result after another message came between, nor a call
answered twice, nor part of a keyed batch; the loser of a race gets
``InvalidInput`` and writes nothing.

The process cases need the store's URL (``store_url``); a backend that cannot
be shared between processes (the RAM store) returns None and they are skipped.
``race_rounds`` (also used by ``bench/concurrent_appends.py``) runs the rounds.
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import pytest

from contextfold.core.errors import InvalidInput
from contextfold.core.log import NewMessage
from contextfold.store.base import Store
from contextfold.testing.store_contract_common import ContractHooks

ROUNDS = 30
WAIT_S = 60.0


class RaceOutcome(NamedTuple):
    """What a race did to the logs: rounds out of order or answered twice (both must be
    0), and how many appends were refused."""

    out_of_place: int
    answered_twice: int
    refused: int


def _call() -> NewMessage:
    call = {"id": "c0", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return NewMessage({"role": "assistant", "content": None, "tool_calls": [call]}, 12)


def _result(text: str) -> NewMessage:
    return NewMessage({"role": "tool", "tool_call_id": "c0", "content": text}, 8)


def _user(text: str) -> NewMessage:
    return NewMessage({"role": "user", "content": text}, 6)


def _writes(case: str) -> tuple[list[NewMessage], list[NewMessage]]:
    """The two batches released at once: a result and a user message, two results, or
    one request's key used for two and for three messages (``whole-keys``)."""
    if case == "result-and-user":
        return [_result("the file")], [_user("meanwhile")]
    if case == "whole-keys":
        batch = [NewMessage(_user(text).message, 6, f"k:{i}") for i, text in enumerate("abc")]
        return batch[:2], batch
    return [_result("first answer")], [_result("second answer")]


def _session(prefix: str, r: int) -> str:
    return f"{prefix}-{r}"


def writer(store: Store, me: int, case: str, prefix: str, rounds: int, barrier: Any) -> list[str]:
    """One side of the race for ``rounds`` rounds; writer 0 also lays each round out.

    Returns the refusals' messages; any error but ``InvalidInput`` propagates.
    """
    refused: list[str] = []
    for r in range(rounds):
        sid = _session(prefix, r)
        if me == 0:
            store.create_session(sid, encoding="o200k_base")
            store.append(sid, [_user("read the file"), _call()])
        barrier.wait(WAIT_S)
        try:
            store.append(sid, _writes(case)[me], whole_keys=case == "whole-keys")
        except InvalidInput as exc:
            refused.append(str(exc))
        barrier.wait(WAIT_S)
    return refused


def _process_writer(
    url: str, me: int, case: str, prefix: str, rounds: int, barrier: Any
) -> list[str]:
    """``writer`` in a process of its own, with the store opened by URL."""
    from contextfold.store.registry import open_store

    store = open_store(url)
    try:
        return writer(store, me, case, prefix, rounds, barrier)
    finally:
        store.close()


def faults(store: Store, prefix: str, rounds: int) -> RaceOutcome:
    """Count the rounds whose log breaks the order, read back as a provider would."""
    out_of_place = twice = 0
    for r in range(rounds):
        log = [m.message for m in store.messages(_session(prefix, r))]
        run_open: set[str] = set()
        answered: set[str] = set()
        bad = double = False
        for message in log:
            if message["role"] != "tool":
                run_open = {c["id"] for c in message.get("tool_calls") or ()}
                answered = set()
                continue
            call_id = message["tool_call_id"]
            if call_id in answered:
                double = True
            elif call_id not in run_open:
                bad = True
            run_open.discard(call_id)
            answered.add(call_id)
        out_of_place += bad
        twice += double
    return RaceOutcome(out_of_place, twice, 0)


def race_rounds(
    case: str,
    rounds: int,
    *,
    store: Store,
    url: str | None = None,
    prefix: str = "race",
) -> RaceOutcome:
    """Run ``rounds`` races of ``case`` on ``store``: in two threads sharing it, or,
    with ``url``, in two spawned processes each opening the store by URL."""
    if url is None:
        barrier: Any = threading.Barrier(2)
        with ThreadPoolExecutor(2) as pool:
            jobs = [pool.submit(writer, store, me, case, prefix, rounds, barrier) for me in (0, 1)]
            refusals = [job.result() for job in jobs]
    else:
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager:
            barrier = manager.Barrier(2)
            with context.Pool(2) as pool:
                args = [(url, me, case, prefix, rounds, barrier) for me in (0, 1)]
                refusals = pool.starmap(_process_writer, args)
    found = faults(store, prefix, rounds)
    return found._replace(refused=sum(len(r) for r in refusals))


class ConcurrentContract(ContractHooks):
    """Two writers racing on one log, in threads and in processes."""

    def _race(self, store: Store, case: str, processes: bool) -> RaceOutcome:
        url = self.store_url(store) if processes else None
        if processes and url is None:
            pytest.skip("this store cannot be shared between processes")
        return race_rounds(case, ROUNDS, store=store, url=url, prefix=f"{case}-{processes}")

    @pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
    def test_a_result_and_a_user_message_at_once_keep_the_order(
        self, store: Store, processes: bool
    ) -> None:
        found = self._race(store, "result-and-user", processes)
        assert (found.out_of_place, found.answered_twice) == (0, 0)
        for r in range(ROUNDS):
            roles = [m.role for m in store.messages(f"result-and-user-{processes}-{r}")]
            assert roles in (["user", "assistant", "tool", "user"], ["user", "assistant", "user"])

    @pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
    def test_two_results_for_one_call_at_once_answer_it_once(
        self, store: Store, processes: bool
    ) -> None:
        found = self._race(store, "two-results", processes)
        assert (found.out_of_place, found.answered_twice, found.refused) == (0, 0, ROUNDS)
        for r in range(ROUNDS):
            roles = [m.role for m in store.messages(f"two-results-{processes}-{r}")]
            assert roles == ["user", "assistant", "tool"]

    @pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
    def test_one_requests_keys_raced_store_one_batch_whole(
        self, store: Store, processes: bool
    ) -> None:
        """The shorter batch first: the longer is refused. The longer first: the shorter
        is answered from it. Never the longer's third message after the shorter."""
        self._race(store, "whole-keys", processes)
        for r in range(ROUNDS):
            logged = store.messages(f"whole-keys-{processes}-{r}")[2:]
            assert [m.message["content"] for m in logged] in (["a", "b"], ["a", "b", "c"])
