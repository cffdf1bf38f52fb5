"""Render latency at 1k, 10k and 100k logged messages, budget 8k tokens, folds in place.

Each log is a synthetic coding-agent run (a user request, two tool calls with
pytest-style output, an answer; repeated) appended with ``session.extend`` in
batches. Folds are put in place the way a long-running session has them: one
summary fold over everything but the last few hundred messages (committed
directly, as a summarizer would), then the ``offline`` preset compacts the
recent part to the budget. ``render_ms_*`` is the best of N renders at 8,000
tokens; the goal is ``render_ratio_100k_1k <= 1.5``, since render's cost must
grow with what it returns, not with the log. ``render_ms_*_unfolded`` renders
the same log in a view without folds, where render's own cut does all the work.
With the SQLite store available, the same figures are taken on a file
(``*_sqlite``). Renders are timed with the view's prompt cache emptied (a
fresh render, as after a fold lands); ``render_ms_*_cached`` is the render of a
view that did not change, served from the cache.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from _common import parse_args, report, timed

from contextfold import Fold, Memory, Session, Store, View
from contextfold.core.messages import Message
from contextfold.memory.cache import PromptCache
from contextfold.store import RAMStore

BUDGET = 8_000
RECENT = 300
BATCH = 5_000
SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000}


def agent_log(n: int) -> list[Message]:
    """A system prompt and ``n - 1`` messages of a repetitive but realistic agent run."""
    out: list[Message] = [
        {"role": "system", "content": "You are a coding agent. Fix failing tests."}
    ]
    r = 0
    while len(out) < n:
        module = f"m{r % 50}"
        out.append({"role": "user", "content": f"step {r}: run tests/test_{module}.py and fix it"})
        for k in range(2):
            call_id = f"call_{r}_{k}"
            args = json.dumps({"path": f"tests/test_{module}.py", "k": k})
            fn = {"name": "run_tests", "arguments": args}
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": fn}],
                }
            )
            failure = f"FAILED tests/test_{module}.py::test_{k} - AssertionError: {r} != {r + 1}\n"
            out.append({"role": "tool", "tool_call_id": call_id, "content": failure * 4})
        out.append({"role": "assistant", "content": f"Fixed {module}: an off-by-one in step {r}."})
        r += 1
    return out[:n]


def build(store: Store, n: int) -> Session:
    """A session of ``n`` messages with a summary fold and compacted recent part."""
    session = Memory(store).session(f"bench-{n}")
    log = agent_log(n)
    for i in range(0, n, BATCH):
        session.extend(log[i : i + BATCH])
    end = max(n - RECENT, 2)
    text = f"[Summary of messages 2-{end}: the agent fixed failing tests module by module.]"
    summary = Fold(
        view="default",
        start=2,
        end=end,
        kind="summary",
        text=text,
        messages=({"role": "user", "content": text},),
        strategy="bench",
        tokens_before=sum(m.tokens for m in store.messages(session.id, 2, end)),
        tokens_after=session.counter.message({"role": "user", "content": text}),
    )
    store.commit_folds(
        session.id, "default", [summary], store.head(session.id, "default").fold_version
    )
    session.view("default", preset="offline", budget=BUDGET).compact()
    return session


def fresh(view: View) -> None:
    """Render with the prompt cache emptied: what a render costs after a fold lands."""
    view.binding.prompts = PromptCache()
    view.render(BUDGET)


def measure(store_for: Any, suffix: str, repeat: int) -> dict[str, Any]:
    """Render timings at each size, on stores made by ``store_for(n)``."""
    figures: dict[str, Any] = {}
    for label, n in SIZES.items():
        session = build(store_for(n), n)
        view = session.view("default")
        rendered = view.render_report(BUDGET)
        assert rendered.tokens <= BUDGET, rendered.tokens
        seconds = timed(lambda view=view: fresh(view), repeat)
        figures[f"render_ms_{label}{suffix}"] = round(seconds * 1000, 3)
        cached = timed(lambda view=view: view.render(BUDGET), repeat)
        figures[f"render_ms_{label}_cached{suffix}"] = round(cached * 1000, 4)
        figures[f"rendered_messages_{label}{suffix}"] = len(rendered.messages)
        figures[f"folds_{label}{suffix}"] = len(view.folds())
        # The same log in a view without folds: render's last-resort cut alone.
        raw = session.view("raw")
        seconds = timed(lambda raw=raw: fresh(raw), repeat)
        figures[f"render_ms_{label}_unfolded{suffix}"] = round(seconds * 1000, 3)
        session.store.close()
    if f"render_ms_100k{suffix}" in figures:
        ratio = figures[f"render_ms_100k{suffix}"] / figures[f"render_ms_1k{suffix}"]
        figures[f"render_ratio_100k_1k{suffix}"] = round(ratio, 3)
    return figures


def main() -> None:
    args = parse_args(__doc__.splitlines()[0] if __doc__ else "render latency")
    repeat = 5 if args.quick else 30
    figures = measure(lambda n: RAMStore(), "", repeat)
    try:
        from contextfold.store.sqlite import SQLiteStore
    except ImportError:
        figures["sqlite"] = "skipped: contextfold.store.sqlite is not available"
    else:
        with tempfile.TemporaryDirectory() as tmp:

            def sqlite_store(n: int) -> Store:
                return SQLiteStore(Path(tmp) / f"render-{n}.db")

            figures.update(measure(sqlite_store, "_sqlite", repeat))
    report(figures, args.json)


if __name__ == "__main__":
    main()
