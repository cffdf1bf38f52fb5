"""Recall from the log: what it adds to a render, and how much of what is asked it brings back.

Latency. The five LoCoMo dev conversations, looped to 1k, 10k and 100k logged
messages (a loop repeats the same text, so at 100k a query's words match about
36 times as many messages as in one conversation), are logged into the RAM
store, SQLite (a file in a temporary directory) and PostgreSQL when it answers
(``$CONTEXTFOLD_BENCH_POSTGRES``, a schema made for the run). One view with the
``offline`` preset and an 8,000-token budget is compacted, then rendered
``CALLS`` times with recall off and on (the same folds: only the view's
``recall`` setting changes), the LoCoMo questions as queries. The prompt cache
is emptied before each render so both arms render afresh. Figures: p50/p99
milliseconds per arm, what recall adds at p50, and the p50 of the store's
search alone with the same queries (most of what recall adds). ``--quick`` stops at 10k
and leaves PostgreSQL out.

Retention. Answer-recall retention (``contextfold.evaluation.retention``, as
``bench/retention.py``) on LoCoMo dev (questions of categories 1-4) and
LongMemEval dev, at 5/10/20% of each conversation's tokens, per half
(``contextfold.evaluation.split``): ``offline`` without recall, ``offline``
with recall, ``keep-recent``, against the full conversation. The recall arm
renders once per question with the question as the query (``query=``) and a
budget less the question's tokens: in use the question is the latest user
message, so its tokens come out of the same budget. The default share and limit
(``contextfold.core.recall``) were chosen from the sweep over ``SHARES`` x
``LIMITS``, run on the tuning halves only at 10% (``sweep_*`` figures); both
halves are reported for the defaults. The recall block's header line is taken
out before scoring: its words are the library's. Session dates are in message ``meta``,
so the full conversation's text lacks them while a recalled line shows them:
the ``non_temporal`` figures leave LoCoMo's temporal questions out. A
question whose budget cannot hold the system prompt and the question (short
LongMemEval chats at 5%) is left out of every arm at that budget.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import POSTGRES, conversations, parse_args, postgres_up, report

from contextfold import BudgetError, Memory
from contextfold.core.messages import Message, text_of
from contextfold.core.recall import HEADER
from contextfold.evaluation.retention import key_words, prompt_words, recall, words
from contextfold.evaluation.split import rows_of
from contextfold.memory.cache import PromptCache
from contextfold.memory.view import View
from contextfold.store import RAMStore, SQLiteStore, Store

CALLS = 200
LATENCY_BUDGET = 8000
BUDGETS = {"5pct": 0.05, "10pct": 0.10, "20pct": 0.20}
SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)
LIMITS = (4, 8, 16, 32)
LOCOMO_CATEGORIES = frozenset({1, 2, 3, 4})
TEMPORAL = {2, "temporal-reasoning"}


# -- latency ----------------------------------------------------------------


def looped_log(size: int) -> list[Message]:
    """``size`` LoCoMo messages, the dev conversations over and over."""
    pool = [m for row in conversations("locomo_dev") for m in row["messages"]]
    return [pool[i % len(pool)] for i in range(size)]


def questions() -> list[str]:
    return [str(q["question"]) for row in conversations("locomo_dev") for q in row["questions"]]


def percentiles_ms(fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    cuts = statistics.quantiles(times, n=100)
    return cuts[49], cuts[98]


def fresh_render(view: View, query: str | None) -> None:
    view.binding.prompts = PromptCache()
    view.render_report(query=query)


def render_latency(
    prefix: str, open_store: Callable[[], Store], sizes: dict[str, int], asked: list[str]
) -> dict[str, float]:
    """Render p50/p99 with recall off and on at the end of each log size."""
    figures: dict[str, float] = {}
    memory = Memory(open_store())
    for label, size in sizes.items():
        session = memory.session(f"log-{label}")
        log = looped_log(size)
        for i in range(0, size, 1000):
            session.extend(log[i : i + 1000])
        view = session.view("offline", preset="offline", budget=LATENCY_BUDGET)
        view.compact()
        view.update(recall=False)
        off = percentiles_ms(lambda: fresh_render(view, None), CALLS)  # noqa: B023
        view.update(recall=None)
        queries: Iterator[str] = iter(asked * (CALLS // len(asked) + 1))
        on = percentiles_ms(lambda: fresh_render(view, next(queries)), CALLS)  # noqa: B023
        figures[f"{prefix}render_ms_p50_off_{label}"] = off[0]
        figures[f"{prefix}render_ms_p99_off_{label}"] = off[1]
        figures[f"{prefix}render_ms_p50_on_{label}"] = on[0]
        figures[f"{prefix}render_ms_p99_on_{label}"] = on[1]
        figures[f"{prefix}recall_adds_ms_p50_{label}"] = on[0] - off[0]
        queries = iter(asked * (CALLS // len(asked) + 1))
        search = percentiles_ms(
            lambda: memory.store.search(session.id, next(queries), limit=16),  # noqa: B023
            CALLS,
        )
        figures[f"{prefix}search_ms_p50_{label}"] = search[0]
    memory.store.close()
    return figures


def postgres_latency(sizes: dict[str, int], asked: list[str]) -> dict[str, float]:
    if not postgres_up():
        return {}
    import psycopg

    from contextfold.store.postgres import PostgresStore

    schema = f"cf_bench_recall_{os.getpid()}"
    url = f"{POSTGRES}?schema={schema}&durability=process"
    try:
        return render_latency("pg_", lambda: PostgresStore(url), sizes, asked)
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# -- retention --------------------------------------------------------------


def keyed_questions(row: dict[str, Any]) -> list[tuple[dict[str, Any], set[str]]]:
    """The row's questions with their answers' key words (as bench/retention.py)."""
    messages = row["messages"]
    df = Counter(w for m in messages for w in words(text_of(m)))
    limit = max(3.0, 0.01 * len(messages))
    return [
        (q, keys)
        for q in row["questions"]
        if "answer" in q and q.get("category") not in (5,) and not q.get("abstention", False)
        for keys in [key_words(q, df, limit)]
        if keys
    ]


Arms = dict[str, list[tuple[bool, float]]]
"""Per arm, each question's (temporal, recall)."""


def score_row(
    row: dict[str, Any],
    budgets: dict[str, float],
    settings: list[dict[str, Any] | None],
    arms: Arms,
) -> None:
    """Add the row's recalls to ``arms``, per budget: full, keep-recent, offline, and
    offline with recall under each of ``settings`` (None: the defaults). A question
    whose budget cannot hold the system prompt and the question is left out of every
    arm at that budget."""
    keyed = keyed_questions(row)
    if not keyed:
        return
    session = Memory().session(row["id"])
    session.extend(row["messages"])
    full_view = session.view("full")
    full_tokens = full_view.state().tokens
    full = prompt_words(full_view.render())
    for budget_key, share in budgets.items():
        budget = int(full_tokens * share)
        recent = session.view(f"keep-recent-{budget_key}", preset="keep-recent", budget=budget)
        view = session.view(f"offline-{budget_key}", preset="offline", budget=budget)
        try:
            recent.compact()
            recent_words = prompt_words(recent.render())
            view.compact()
            view.update(recall=False)
            plain = view.render_report()
        except BudgetError:
            continue
        assert plain.tokens <= budget, (row["id"], budget, plain.tokens)
        plain_words = prompt_words(plain.messages)
        seen: list[dict[str, set[str]]] = [
            {"full": full, "keep_recent": recent_words, "offline": plain_words} for _ in keyed
        ]
        for setting in settings:
            view.update(recall=True if setting is None else setting)
            name = "recall" if setting is None else f"sweep_{setting['share']}_{setting['limit']}"
            for (q, _), found in zip(keyed, seen, strict=True):
                question = {"role": "user", "content": str(q["question"])}
                room = budget - session.counter.message(question)
                try:
                    rendered = view.render_report(room, query=str(q["question"]))
                except BudgetError:
                    found.clear()
                    continue
                assert rendered.tokens <= room, (row["id"], room, rendered.tokens)
                if found:
                    found[f"offline_{name}"] = prompt_words(without_header(rendered.messages))
        for (q, keys), found in zip(keyed, seen, strict=True):
            temporal = q.get("category") in TEMPORAL
            for arm, vocabulary in found.items():
                arms.setdefault(f"{arm}_{budget_key}", []).append(
                    (temporal, recall(keys, vocabulary))
                )


def without_header(messages: list[Message]) -> list[Message]:
    """The prompt with the recall block's header line taken out: its words are
    the library's, not the conversation's, and must not count as recalled."""
    return [
        {**m, "content": m["content"].replace(HEADER, "")}
        if m["role"] == "system" and isinstance(m.get("content"), str)
        else m
        for m in messages
    ]


def retention_figures(prefix: str, arms: Arms) -> dict[str, float]:
    """Each arm's mean recall over the full conversation's, on the same questions."""

    def mean(arm: str, skip_temporal: bool = False) -> float:
        return statistics.fmean(r for t, r in arms[arm] if not (skip_temporal and t))

    figures: dict[str, float] = {}
    for arm in sorted(arms):
        if arm.startswith("full_"):
            continue
        full = "full_" + arm.rsplit("_", 1)[1]
        figures[f"{prefix}retention_{arm}"] = mean(arm) / mean(full)
        if any(t for t, _ in arms[arm]):
            figures[f"{prefix}retention_{arm}_non_temporal"] = mean(arm, True) / mean(full, True)
    for arm in sorted(a for a in arms if a.startswith("full_")):
        figures[f"{prefix}questions_{arm.removeprefix('full_')}"] = len(arms[arm])
    return figures


def retention_run(
    data: str, half: str, budgets: dict[str, float], settings: list[dict[str, Any] | None]
) -> dict[str, float]:
    rows = list(rows_of(conversations(data), half))
    arms: Arms = {}
    for row in rows:
        score_row(row, budgets, settings, arms)
    return retention_figures(f"{data}_{half}_", arms) if arms else {}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0] if __doc__ else "")
    sizes = {"1k": 1000, "10k": 10_000}
    if not args.quick:
        sizes["100k"] = 100_000
    asked = questions()
    figures: dict[str, float] = {}
    started = time.perf_counter()
    sweep: list[dict[str, Any] | None] = [{"share": s, "limit": n} for s in SHARES for n in LIMITS]
    if args.quick:
        figures.update(retention_run("locomo_dev", "checking", {"10pct": 0.10}, [None]))
    else:
        for data in ("locomo_dev", "longmemeval_oracle_dev"):
            sweep_figures = retention_run(data, "tuning", {"10pct": 0.10}, sweep)
            figures.update({k: v for k, v in sweep_figures.items() if "_sweep_" in k})
        for half in ("tuning", "checking"):
            figures.update(retention_run("locomo_dev", half, BUDGETS, [None]))
            figures.update(retention_run("longmemeval_oracle_dev", half, BUDGETS, [None]))
    figures["retention_seconds"] = time.perf_counter() - started
    figures.update(render_latency("ram_", RAMStore, sizes, asked))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "recall.db"
        figures.update(render_latency("sqlite_", lambda: SQLiteStore(path), sizes, asked))
    if not args.quick:
        figures.update(postgres_latency(sizes, asked))
    report(figures, args.json)


if __name__ == "__main__":
    main()
