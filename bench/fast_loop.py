"""A fast agent loop: does render cut what a fold could have held?

The shared agent runs (10 tau-bench runs and the 3 OpenHands runs; ``--quick``
fewer) are replayed one message at a time into a fresh in-memory session, a
``ThreadRunner`` watching the view, budget a third of each run's tokens, and
the view rendered after every append. Arms, all in one run:

- ``offline``: the model-free preset, its folds made by the runner;
- ``rolling``: the rolling summary on a model double that takes 1 s a call
  (``SlowModel``: the offline stand-in's answers after a pause);

each with an append every 20 ms (``paced``) and back to back (``b2b``), with
the bridge (render folds what it would cut, provisionally) and without it (the
render of before: the cut). Figures per arm: renders; renders that left
messages out with no fold in their place (``cut_renders``, goal 0 with the
bridge), of them those where no fold could have made the prompt fit
(``cut_renders_no_fold_fits``: the system prompt, the latest user message and
the newest unit alone leave no room for a fold), and the messages left out; provisional folds made; the time from a provisional
fold to the committed fold that replaced it (p50/p99); render p50/p99 in ms.
``bridge_cost_p50`` / ``_p99`` divide the render times with the bridge by those
without, per arm, within this run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from _common import conversations, parse_args, report

from contextfold import BudgetError, Event, Memory, ThreadRunner
from contextfold.core.events import EventCallback
from contextfold.core.folds import Fold
from contextfold.memory.bridge import Bridge, Bridged, runs
from contextfold.strategies.base import ViewState
from contextfold.testing.models import SlowModel

PACE_S = 0.02
SMALLEST_FOLD = 40
"""About the least a fold costs: its header and range label."""
MODEL_S = 1.0


class NoBridge(Bridge):
    """Render as before the bridge: nothing provisional, the cut."""

    def folds(
        self,
        state: ViewState,
        over: Callable[[Sequence[Fold]], int],
        callbacks: list[EventCallback],
    ) -> Bridged:
        return Bridged((), False)


def could_fit(state: ViewState) -> bool:
    """Whether folds could make the view fit: what no bridge step may fold (system prompt,
    committed folds, the latest user message, the newest unit), with a fold of
    ``SMALLEST_FOLD`` tokens for each run of what it may, within the budget."""
    spans = runs(state)
    foldable = sum(
        e.tokens for run in spans for first, last in run for e in state.entries[first : last + 1]
    )
    assert state.budget is not None
    return state.tokens - foldable + SMALLEST_FOLD * len(spans) <= state.budget


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def replay(
    messages: list[dict[str, Any]], preset: str, pace: float, bridged: bool
) -> dict[str, Any] | None:
    """One run replayed: what its renders did. None when its budget cannot hold the
    system prompt and a user message (refused by design)."""
    memory = Memory()
    system = [m for m in messages if m["role"] == "system"][:1]
    rest = [m for m in messages if m is not system[0]] if system else messages
    session = memory.session("run", system=system[0]["content"] if system else None)
    budget = sum(session.counter.message(m) for m in messages) // 3
    llm = SlowModel(MODEL_S) if preset == "rolling" else None
    view = session.view("default", preset=preset, budget=budget, llm=llm)
    if not bridged:
        view.binding.bridge = NoBridge()
    events: list[Event] = []
    view.on_event.append(events.append)
    renders: list[float] = []
    cut = left_out = unfit = 0
    with ThreadRunner(workers=1) as runner:
        runner.watch(view)
        for message in rest:
            began = time.perf_counter()
            session.append(message)
            t0 = time.perf_counter()
            try:
                rendered = view.render_report()
            except BudgetError:
                return None
            renders.append(time.perf_counter() - t0)
            if rendered.omitted:
                cut += 1
                left_out += rendered.omitted
                unfit += not could_fit(view.state())
            if pace:
                time.sleep(max(0.0, pace - (time.perf_counter() - began)))
        runner.stop(timeout=0.1, drain=False)
    return {
        "renders": renders,
        "cut": cut,
        "unfit": unfit,
        "left_out": left_out,
        "provisional": sum(1 for e in events if e.kind == "provisional"),
        "provisional_ms": [e.duration_s * 1000 for e in events if e.kind == "provisional"],
        "replaced_s": [e.duration_s for e in events if e.kind == "replaced"],
        "committed": sum(1 for e in events if e.kind == "committed"),
    }


def main() -> None:
    args = parse_args(__doc__ or "")
    rows = list(conversations("taubench_airline_dev", 3 if args.quick else 10))
    rows += list(conversations("openhands_example", 1 if args.quick else 3))
    figures: dict[str, Any] = {"runs": len(rows), "pace_ms": PACE_S * 1000, "model_s": MODEL_S}
    arms = [
        (preset, pace_name, pace)
        for preset in ("offline", "rolling")
        for pace_name, pace in (("paced", PACE_S), ("b2b", 0.0))
    ]
    for preset, pace_name, pace in arms:
        medians = {}
        for bridged in (True, False):
            results = [replay(r["messages"], preset, pace, bridged) for r in rows]
            done = [r for r in results if r is not None]
            renders = [t for r in done for t in r["renders"]]
            key = f"{preset}_{pace_name}_{'bridge' if bridged else 'cut'}"
            p50, p99 = percentile(renders, 0.5) * 1000, percentile(renders, 0.99) * 1000
            medians[bridged] = (p50, p99)
            figures[key] = {
                "refused_runs": len(results) - len(done),
                "renders": len(renders),
                "cut_renders": sum(r["cut"] for r in done),
                "cut_renders_no_fold_fits": sum(r["unfit"] for r in done),
                "messages_left_out": sum(r["left_out"] for r in done),
                "provisional_folds": sum(r["provisional"] for r in done),
                "provisional_ms_p50": round(
                    percentile([t for r in done for t in r["provisional_ms"]], 0.5), 2
                ),
                "replaced": sum(len(r["replaced_s"]) for r in done),
                "replaced_after_s_p50": round(
                    percentile([t for r in done for t in r["replaced_s"]], 0.5), 3
                ),
                "replaced_after_s_p99": round(
                    percentile([t for r in done for t in r["replaced_s"]], 0.99), 3
                ),
                "commits": sum(r["committed"] for r in done),
                "render_ms_p50": round(p50, 3),
                "render_ms_p99": round(p99, 3),
            }
            print(key, figures[key], flush=True)
        base = f"{preset}_{pace_name}"
        figures[f"{base}_bridge_cost_p50"] = round(medians[True][0] / medians[False][0], 2)
        figures[f"{base}_bridge_cost_p99"] = round(medians[True][1] / medians[False][1], 2)
    figures["cut_renders_with_bridge"] = sum(
        figures[f"{p}_{n}_bridge"]["cut_renders"] for p, n, _ in arms
    )
    figures["cut_renders_with_bridge_a_fold_could_fit"] = sum(
        figures[f"{p}_{n}_bridge"]["cut_renders"]
        - figures[f"{p}_{n}_bridge"]["cut_renders_no_fold_fits"]
        for p, n, _ in arms
    )
    figures["mean_render_ms"] = round(
        statistics.mean(figures[f"{p}_{n}_bridge"]["render_ms_p50"] for p, n, _ in arms), 3
    )
    report(figures, args.json)


if __name__ == "__main__":
    main()
