"""Claude token counts: the offline estimate against a reference count, on real conversations.

The reference is ``ctok`` (``pip install ctok``; it declares Python 3.12 and
runs on 3.11 with ``--ignore-requires-python``), an offline reconstruction of
what Anthropic's ``count_tokens`` answers, for both Claude vocabularies (``v3``
and ``v4.7``). Claude's tokenizer itself is not public, so no offline count is
Claude's: the figures say how far the estimate is from ``ctok``, and ``ctok``
states its own distance from ``count_tokens`` (exact on its code corpora,
0.06% mean on its 501-language corpus).

Counted per conversation: every text a provider is sent (contents, tool call
names and arguments), without message framing, which only ``count_tokens``
knows. For each vocabulary: the ratio of the reference to the ``o200k_base``
count (token-weighted mean, lowest and highest conversation), and the error of
the estimate (``o200k_base`` times the vocabulary's factor) against the
reference: token-weighted mean, the lowest and highest conversation (a negative
error undercounts: a budget made with it would overflow), and how many
conversations it undercounts. ``calibrated`` is the same error with the factor
the proxy uses once a ``Calibration`` has counted the conversations before each
one (the files' conversations taken in turn, as a server meets them): the
measured one where it is above the stated one. ``measured_alone`` is the error
were the measured factor trusted even below the stated one (it is not: this
figure says why); ``tiktoken_alone`` is the error without a factor.

The first 50 conversations of each of the four data files are read, each up to
40,000 characters (``--quick``: 4 and 6,000); without the shared data, the
copies in ``tests/fixtures`` (a failure under ``CI=true``).
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from _common import ROOT, data_dir, parse_args, report

from contextfold.core.claude_tokens import V3, V4_7, Vocabulary
from contextfold.core.tokens import get_counter
from contextfold.llm.claude_calibration import KEEP, MARGIN

FILES = ("locomo_dev", "longmemeval_oracle_dev", "taubench_airline_dev", "openhands_example")
CONVERSATIONS, CHARS = 50, 40_000
QUICK_CONVERSATIONS, QUICK_CHARS = 4, 6_000
CTOK_VERSIONS = {V3.name: "3.0", V4_7.name: "4.7"}


def rows(name: str) -> Iterator[dict[str, Any]]:
    """The shared data's rows, else the fixtures' (none for a file they lack)."""
    shared = data_dir() / f"{name}.jsonl"
    if shared.exists():
        with shared.open(encoding="utf-8") as fh:
            yield from (json.loads(line) for line in fh)
        return
    if os.environ.get("CI", "").lower() == "true":
        raise SystemExit(f"{shared} is missing: the shared data is needed under CI=true")
    fixture = ROOT / "tests" / "fixtures" / f"{name}.jsonl.gz"
    if fixture.exists():
        with gzip.open(fixture, "rt", encoding="utf-8") as fh:
            yield from (json.loads(line) for line in fh)


def texts(message: dict[str, Any]) -> list[str]:
    """What of a message is sent as text: its content, its tool calls' names and arguments."""
    content = message.get("content")
    found = [content] if isinstance(content, str) else []
    if isinstance(content, list):
        found += [part.get("text", "") for part in content if isinstance(part, dict)]
    for call in message.get("tool_calls") or []:
        found += [call["function"]["name"], call["function"].get("arguments", "")]
    return [text for text in found if text]


def sample(name: str, conversations: int, chars: int) -> list[list[str]]:
    """The first ``conversations`` of ``name``, each a list of texts, each cut after the
    text that reaches ``chars`` characters."""
    taken: list[list[str]] = []
    for row in rows(name):
        conversation: list[str] = []
        left = chars
        for text in (t for message in row["messages"] for t in texts(message)):
            if left <= 0:
                break
            conversation.append(text)
            left -= len(text)
        if conversation:
            taken.append(conversation)
        if len(taken) == conversations:
            break
    return taken


def reference(vocab: Vocabulary) -> Any:
    """``ctok``'s content count for ``vocab``: its count less that of an empty message."""
    try:
        from ctok import token_count
    except ImportError:
        raise SystemExit(
            "the reference count needs ctok: pip install --ignore-requires-python 'ctok>=1.3'"
        ) from None
    version = CTOK_VERSIONS[vocab.name]
    frame = token_count("", version)
    return lambda text: max(0, token_count(text, version) - frame)


def errors(estimates: list[float], references: list[int]) -> dict[str, Any]:
    """Token-weighted error, lowest and highest conversation, conversations undercounted."""
    each = [(e - r) / r for e, r in zip(estimates, references, strict=True) if r]
    return {
        "mean_pct": round(100 * (sum(estimates) - sum(references)) / sum(references), 2),
        "lowest_pct": round(100 * min(each), 2),
        "highest_pct": round(100 * max(each), 2),
        "undercounted": f"{sum(e < 0 for e in each)}/{len(each)}",
    }


def calibrated(vocab: Vocabulary, local: list[int], counted: list[int]) -> list[float]:
    """Each conversation estimated as the proxy does once a ``Calibration`` has counted the
    conversations before it: the highest of their last ``KEEP`` ratios times ``MARGIN``
    where that is above the stated factor, else the stated factor."""
    seen: deque[float] = deque(maxlen=KEEP)
    estimates = []
    for n, r in zip(local, counted, strict=True):
        measured = max(seen) * MARGIN if seen else 0.0
        estimates.append(n * max(measured, vocab.factor))
        if n:
            seen.append(r / n)
    return estimates


def trusted(local: list[int], counted: list[int]) -> list[float]:
    """The same, were the measured factor used even below the stated one (the first
    conversation, with nothing counted yet, at its own ratio)."""
    seen: deque[float] = deque(maxlen=KEEP)
    estimates = []
    for n, r in zip(local, counted, strict=True):
        estimates.append(n * (max(seen) * MARGIN if seen else r / max(n, 1)))
        if n:
            seen.append(r / n)
    return estimates


def main() -> None:
    args = parse_args(__doc__ or "")
    size = (QUICK_CONVERSATIONS, QUICK_CHARS) if args.quick else (CONVERSATIONS, CHARS)
    o200k = get_counter("o200k_base")
    taken = {name: sample(name, *size) for name in FILES}
    # As a server meets them: one conversation of each file in turn.
    turns = itertools.zip_longest(*(taken[name] for name in FILES))
    conversations = [c for turn in turns for c in turn if c is not None]
    local = [sum(o200k.text(text) for text in c) for c in conversations]
    figures: dict[str, Any] = {
        "conversations": len(conversations),
        "characters": sum(len(t) for c in conversations for t in c),
        "tokens_o200k": sum(local),
    }
    for vocab in (V3, V4_7):
        count = reference(vocab)
        t0 = time.perf_counter()
        counted = [sum(count(text) for text in c) for c in conversations]
        spent = time.perf_counter() - t0
        ratios = [r / n for r, n in zip(counted, local, strict=True) if n]
        figures[vocab.name] = {
            "factor": vocab.factor,
            "ratio_mean": round(sum(counted) / sum(local), 3),
            "ratio_lowest": round(min(ratios), 3),
            "ratio_highest": round(max(ratios), 3),
            "estimate": errors([n * vocab.factor for n in local], counted),
            "calibrated": errors(calibrated(vocab, local, counted), counted),
            "measured_alone": errors(trusted(local, counted), counted),
            "tiktoken_alone": errors([float(n) for n in local], counted),
            "reference_s": round(spent, 1),
        }
    report(figures, args.json)


if __name__ == "__main__":
    main()
