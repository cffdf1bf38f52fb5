"""Recall tools: p50/p99 ms of a model's search and expand calls on a 100k-message SQLite session.

The session logs real conversation (bench/search.py's log: the four data sets
in turn, repeated to 100,000 messages) in batched appends, and its view holds
folds of about ``FOLD_MESSAGES`` messages each over all but the newest
messages, each a one-line summary labelled with its range, cut at unit
boundaries, as compaction would leave them. ``RecallTools.answer`` is timed as
a model's call reaches it (JSON arguments in, JSON text out):

- searches: real user text (bench/search.py's queries), a third plain, a third
  with ``role: user``, a third with ``after`` a time in the log's middle;
- expansions: a fold by id (its first page), then its second page by the
  cursor the first handed out, when it has one;
- the folds listing, once per search.

Beside it, in the same store, another tenant's session (``other/b``) holds
messages with words of its own and folds of its own. Every cross-tenant attempt
(expanding one of its fold ids, searching for one of its words, expanding a seq
range of its log) is checked: a leak is an answer that holds any of its words
or expands one of its folds. Goal: 0 leaks. ``--quick``: 10,000 messages.
"""

from __future__ import annotations

import functools
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import parse_args, report
from search import conversation_log, queries
from store import take

from contextfold import Memory
from contextfold.core.entries import Entry
from contextfold.core.folds import Fold, labelled
from contextfold.core.log import LoggedMessage, NewMessage
from contextfold.core.messages import text_of
from contextfold.core.tokens import get_counter
from contextfold.core.units import unit_spans
from contextfold.memory.recall_tools import EXPAND, FOLDS, SEARCH, RecallTools
from contextfold.store import SQLiteStore

FOLD_MESSAGES = 200
RECENT = 300
CALLS = 300
OTHER = 2000
BATCH = 1000


def build_log(store: SQLiteStore, session_id: str, messages: Sequence[NewMessage]) -> None:
    for i in range(0, len(messages), BATCH):
        store.append(session_id, messages[i : i + BATCH])


def fold_all(memory: Memory, store: SQLiteStore, session_id: str, recent: int) -> list[Fold]:
    """Folds of about ``FOLD_MESSAGES`` messages over all but the newest ``recent``, cut at
    unit boundaries and around system messages, committed in one call."""
    session = memory.session(session_id)
    logged = session.messages()
    counter = session.counter
    spans = unit_spans([Entry.of_message(m) for m in logged])
    folds: list[Fold] = []
    run: list[LoggedMessage] = []

    def close() -> None:
        if run:
            start, end = run[0].seq, run[-1].seq
            summary = {"role": "user", "content": f"[SUMMARY] {one_line(run)}"}
            message = labelled(summary, start, end)
            folds.append(
                Fold(
                    view="default",
                    start=start,
                    end=end,
                    kind="summary",
                    text=str(summary["content"]),
                    messages=(message,),
                    strategy="bench",
                    tokens_before=sum(m.tokens for m in run),
                    tokens_after=counter.message(message),
                )
            )
            run.clear()

    limit = logged[-1].seq - recent
    for i, j in spans:
        unit = logged[i : j + 1]
        if unit[-1].seq > limit:
            break
        if any(m.role in ("system", "developer") for m in unit):
            close()
            continue
        run.extend(unit)
        if len(run) >= FOLD_MESSAGES:
            close()
    close()
    view = session.view("default")
    view.commit_folds(folds, store.head(session_id, "default").fold_version)
    return folds


def one_line(run: Sequence[LoggedMessage]) -> str:
    words = " ".join(text_of(m.message) for m in run[:3]).split()
    return " ".join(words[:30])


def percentiles(times: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(times, n=100)
    return cuts[49], cuts[98]


def timed_calls(calls: Sequence[Callable[[], str]]) -> tuple[list[float], list[str]]:
    times, answers = [], []
    for fn in calls:
        t0 = time.perf_counter()
        answers.append(fn())
        times.append((time.perf_counter() - t0) * 1000)
    return times, answers


def other_tenant(store: SQLiteStore, memory: Memory) -> tuple[list[str], list[str], int]:
    """The other tenant's session: its own words (``zq<n>secret``), its folds; returns the
    words, the fold ids and its last seq."""
    counter = get_counter()
    memory.session("other/b", system="You are another tenant's agent.")
    secret = [f"zq{n}secret" for n in range(OTHER // 2)]
    batch = []
    for n, word in enumerate(secret):
        batch.append({"role": "user", "content": f"Our private note {n}: {word}"})
        batch.append({"role": "assistant", "content": f"Noted {word}."})
    build_log(store, "other/b", [NewMessage(m, counter.message(m)) for m in batch])
    folds = fold_all(memory, store, "other/b", recent=20)
    return secret, [f.id for f in folds], store.last_seq("other/b")


def leaks_in(answer: str, secret: set[str]) -> bool:
    return any(word in secret for word in answer.replace('"', " ").replace(".", " ").split())


def main() -> None:
    args = parse_args(__doc__ or "")
    size = 10_000 if args.quick else 100_000
    calls = 100 if args.quick else CALLS
    figures: dict[str, Any] = {"messages": size}
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "recall.db")
        memory = Memory(store)
        session = memory.session("acme/a", system="You are a helpful assistant.")
        log = take(conversation_log(), size)
        t0 = time.perf_counter()
        build_log(store, "acme/a", log)
        figures["build_s"] = time.perf_counter() - t0
        folds = fold_all(memory, store, "acme/a", recent=RECENT)
        figures["folds"] = len(folds)
        tools = RecallTools(session)
        tools.answer(FOLDS, {})  # the view checks its folds once, on its first read
        middle = session.messages(after=size // 2, limit=1)[0].created_at
        rng = random.Random(7)

        def search_call(i: int, text: str) -> Callable[[], str]:
            arguments: dict[str, Any] = {"query": text}
            if i % 3 == 1:
                arguments["role"] = "user"
            elif i % 3 == 2:
                arguments["after"] = middle
            encoded = json.dumps(arguments)
            return lambda: tools.answer(SEARCH, encoded)

        times, answers = timed_calls(
            [search_call(i, text) for i, text in enumerate(queries(calls))]
        )
        found = [json.loads(a) for a in answers]
        figures["searches"] = len(found)
        figures["searches_answered"] = sum("hits" in r for r in found)
        figures["searches_with_hits"] = sum(bool(r.get("hits")) for r in found)
        figures["search_ms_p50"], figures["search_ms_p99"] = percentiles(times)

        chosen = [rng.choice(folds) for _ in range(calls)]
        firsts = [functools.partial(tools.answer, EXPAND, {"id": fold.id}) for fold in chosen]
        first_times, first_answers = timed_calls(firsts)
        cursors = [json.loads(a)["next_cursor"] for a in first_answers]
        seconds = [
            functools.partial(tools.answer, EXPAND, {"id": fold.id, "cursor": cursor})
            for fold, cursor in zip(chosen, cursors, strict=True)
            if cursor is not None
        ]
        second_times, second_answers = timed_calls(seconds)
        expanded = [json.loads(a) for a in first_answers + second_answers]
        figures["expansions"] = len(expanded)
        figures["expansions_answered"] = sum(bool(r.get("messages")) for r in expanded)
        counter = session.counter
        figures["expansion_over_max_tokens"] = sum(
            counter.text(a) > tools.max_tokens for a in first_answers + second_answers
        )
        all_times = first_times + second_times
        figures["expand_ms_p50"], figures["expand_ms_p99"] = percentiles(all_times)
        folds_times, _ = timed_calls([lambda: tools.answer(FOLDS, {})] * 20)
        figures["folds_ms_p50"] = statistics.median(folds_times)

        secret, other_folds, other_last = other_tenant(store, memory)
        words = set(secret)
        attempts = leaks = 0
        for fold_id in other_folds:
            answer = tools.answer(EXPAND, {"id": fold_id})
            attempts += 1
            leaks += "error" not in json.loads(answer) or leaks_in(answer, words)
        for word in rng.sample(secret, min(len(secret), calls)):
            answer = tools.answer(SEARCH, {"query": word})
            attempts += 1
            # The answer repeats the query: only its hits could leak.
            hits = json.loads(answer)["hits"]
            leaks += bool(hits) or leaks_in(json.dumps(hits), words)
        for start in range(1, other_last, max(1, other_last // calls)):
            answer = tools.answer(EXPAND, {"start": start, "end": start + 20})
            attempts += 1
            leaks += leaks_in(answer, words)
        # The other tenant's own tools do find its words: the attempts above could leak.
        theirs = RecallTools(memory.session("other/b"))
        reachable = sum(
            bool(json.loads(theirs.answer(SEARCH, {"query": w}))["hits"]) for w in secret[:20]
        )
        figures["cross_tenant_attempts"] = attempts
        figures["cross_tenant_leaks"] = leaks
        figures["other_tenant_finds_its_own"] = reachable
        memory.close()
    report(figures, args.json)


if __name__ == "__main__":
    main()
