"""The scripted model of the recall tools' adapter tests, whatever the framework.

A file the agent reads in the second turn of a session names a codeword
(``secret_line``); later turns fold that tool output away. On the recall turn the model searches for the codeword, expands the
folded range the search names, then searches for a word only another session
holds (``OTHER``), then answers. ``next_call`` reads the tool results the
model has been sent so far (in whichever protocol) and picks the next call;
``recall_faults`` checks those results.
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
    hits = results[0].get("hits") or [{"seq": 1, "folded": None}]
    start, end = hits[0]["folded"] or [hits[0]["seq"], hits[0]["seq"]]
    pages = results[1:]
    if not pages:
        return EXPAND, {"start": start, "end": end}
    if "hits" in pages[-1]:
        return None  # the other session's search is done
    if SECRET not in json.dumps(pages) and pages[-1].get("next_cursor"):
        return EXPAND, {"start": start, "end": end, "cursor": pages[-1]["next_cursor"]}
    return SEARCH, {"query": OTHER}


def recall_faults(results: list[dict[str, Any]], prompt_texts: list[str]) -> list[str]:
    """What is wrong with the results the model got: the search must name a folded seq
    (one the prompt it answered did not show), the expansion's pages must give back the
    codeword, the other session's word must not be found."""
    if len(results) < 3:
        return [f"{len(results)} recall results reached the model, not 3 or more"]
    faults = []
    search, *expanded, other = results
    hits = search.get("hits") or []
    if not hits:
        faults.append(f"the search for {SECRET} found nothing: {search}")
    elif hits[0]["fold"] is None or hits[0]["folded"] is None:
        faults.append(f"the hit {hits[0]} names no fold")
    else:
        start, end = hits[0]["folded"]
        if not start <= hits[0]["seq"] <= end:
            faults.append(f"hit seq {hits[0]['seq']} outside its fold {start}-{end}")
    if any(SECRET in text for text in prompt_texts):
        faults.append("the codeword was still in the prompt: nothing to recall")
    if SECRET not in json.dumps([page.get("messages") for page in expanded]):
        faults.append(f"the expansion did not give the codeword back: {expanded}")
    if other.get("hits") != []:
        faults.append(f"another session's word was found: {other}")
    return faults
