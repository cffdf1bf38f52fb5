"""The scripted model of the recall tools' adapter tests, whatever the framework.

A file the agent reads in the second turn of a session names a codeword
(``secret_line``); later turns fold that tool output away. On the recall turn the model searches for the codeword, expands the
folded range the search names, then searches for a word only another session
holds (``OTHER``), then answers. ``RecallModel`` is given the newest
recall result of each request (in whichever protocol: the older ones may be
masked by then, as any tool output) and picks the next call; ``recall_faults``
checks those results.
"""

from __future__ import annotations

import json
from typing import Any

from contextfold import Session
from contextfold.memory.recall_tools import EXPAND, SEARCH

SECRET = "quetzalcoatl"
OTHER = "zanzibar"
ANSWER = "The codeword was quetzalcoatl."


secret_line = f"The codeword is {SECRET}.\n"


def other_session(session: Session) -> None:
    """A second session (another tenant) whose words the recall tools must not find."""
    session.record(
        [
            {"role": "user", "content": f"Keep this private: the password is {OTHER}."},
            {"role": "assistant", "content": f"Noted, {OTHER} is kept."},
        ]
    )


def next_call(results: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The model's next recall call given the recall results it was sent (oldest first),
    or None once it has what it needs (it answers ``ANSWER``): a search, the pages of
    the folded range its first hit names until the codeword shows, the other search."""
    if not results:
        return SEARCH, {"query": SECRET}
    hit = folded_hit(results[0]) or {"seq": 1, "folded": None}
    start, end = hit["folded"] or [hit["seq"], hit["seq"]]
    pages = results[1:]
    if not pages:
        return EXPAND, {"start": start, "end": end}
    if "hits" in pages[-1]:
        return None  # the other session's search is done
    if SECRET not in json.dumps(pages) and pages[-1].get("next_cursor"):
        return EXPAND, {"start": start, "end": end, "cursor": pages[-1]["next_cursor"]}
    return SEARCH, {"query": OTHER}


class RecallModel:
    """The recall turn's model: what it read in each request's newest recall result."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []

    def step(self, newest: dict[str, Any] | None) -> tuple[str, dict[str, Any]] | None:
        if newest is not None:
            self.results.append(newest)
        return next_call(self.results)


def folded_hit(search: dict[str, Any]) -> dict[str, Any] | None:
    """The best hit of a search that a fold hides (a framework that logs the model's call
    before running it finds the search call itself first)."""
    return next((h for h in search.get("hits") or [] if h["folded"] is not None), None)


def recall_faults(results: list[dict[str, Any]], prompt_texts: list[str]) -> list[str]:
    """What is wrong with the results the model got: the search must name a folded seq
    (one the prompt it answered did not show), the expansion's pages must give back the
    codeword, the other session's word must not be found."""
    if len(results) < 3:
        return [f"{len(results)} recall results reached the model, not 3 or more"]
    faults = []
    search, *expanded, other = results
    hit = folded_hit(search)
    if hit is None:
        faults.append(f"the search for {SECRET} found nothing folded: {search}")
    else:
        start, end = hit["folded"]
        if hit["fold"] is None or not start <= hit["seq"] <= end:
            faults.append(f"hit {hit} is outside its fold")
    if any(SECRET in text for text in prompt_texts):
        faults.append("the codeword was still in the prompt: nothing to recall")
    if SECRET not in json.dumps([page.get("messages") for page in expanded]):
        faults.append(f"the expansion did not give the codeword back: {expanded}")
    # The search call itself is logged (and found) in a framework that logs a call first.
    found = [h for h in other.get("hits") or [] if "contextfold_search" not in h["snippet"]]
    if "hits" not in other or found:
        faults.append(f"another session's word was found: {other}")
    return faults


def newest_result(body: dict[str, Any]) -> dict[str, Any] | None:
    """A Chat Completions request's newest message, when it is a recall tool's result."""
    last = body["messages"][-1]
    if last["role"] != "tool" or not last["tool_call_id"].startswith("recall_"):
        return None
    return json.loads(last["content"])  # type: ignore[no-any-return]
