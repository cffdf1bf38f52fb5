"""Salience: which sentences of a text carry the most information per token.

Sentences are chosen greedily for what they add per token: each specific
content word (one that few sources use) is worth the most a word can be, a
commoner one its rarity (inverse document frequency over sources), a word
already kept is worth nothing again (no redundancy), and names, numbers and
relative times weigh more. An unnamed assistant's words (a model's, which it
can say again) weigh less than a person's or a tool's. Sentences carrying must-keep
items (``contextfold.extract.artifacts``: paths, URLs, identifiers, numbers, dates,
error lines, a user's constraints) go first, up to ``must_share`` of the room,
so a tight budget still leaves room for prose. Kept sentences stay whole (only
overlong ones are cut into clauses, and prose loses its filler words:
``candidates``) and in order, prefixed with their speaker.

``ExtractiveSummary`` (``strategies.extractive``) folds rounds with this
selector and the offline stand-in model (``llm.offline``) answers with it
(``key_sentences``), so both choose the same sentences and must-keep items.
That is why the selector is not in ``strategies/`` beside the one strategy
that folds with it: the offline model is a port, and a port may not import a
strategy. Candidates (the scored sentences) are read in ``candidates``.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.core.tokens import TokenCounter
from contextfold.extract.candidates import Candidate, Source, candidates_of

# An artifact's extra worth, weighed as a word seen once.
ARTIFACT_WEIGHT = 1.0
# A word in at most SPECIFIC_SHARE of the sources (and never fewer than
# SPECIFIC_MIN) is specific: among those, how rare matters little (on the dev
# data's tuning half a word said once is no likelier to be asked about than one
# said five times), so each is worth the most a word can be.
SPECIFIC_SHARE = 0.01
SPECIFIC_MIN = 3
# What an unnamed assistant (a model) said it can say again; what people said,
# and what tools returned, it cannot.
MODEL_SPEAKER = "assistant"
MODEL_WEIGHT = 0.5
# Must-keep items (artifacts, error lines, a user's constraints) outrank any
# sentence while they fit ``must_share`` of the fold.
MUST_WEIGHT = 100.0


@dataclass(frozen=True)
class Frequencies:
    """How many sources were read, and how many of them hold each word.

    A fold keeps them (``carried``) so that the next fold, which reads only the
    kept lines and the rounds since, weighs words as if over every message
    folded: counted over its own sources, a word the whole conversation keeps
    using looks as specific as a name said once.
    """

    sources: int
    df: dict[str, int]

    def specific(self) -> float:
        """The most sources a specific word may be in (see ``SPECIFIC_SHARE``)."""
        return max(SPECIFIC_MIN, SPECIFIC_SHARE * (self.sources + 1))

    def carried(self, kept: Iterable[str]) -> Frequencies:
        """What a fold keeps: the counts of the ``kept`` words (its lines' and spare
        lines') and of every word said more than once. A word said once and
        dropped is specific wherever it is seen again, unless said there often."""
        keep = set(kept)
        return Frequencies(
            self.sources, {w: d for w, d in sorted(self.df.items()) if d > 1 or w in keep}
        )


@dataclass(frozen=True)
class Weights:
    """Each candidate's content words with their rarity, and the rarest a word can be.

    They depend on the candidates alone, so a selection repeated with more room
    (``ExtractiveSummary``'s refills) weighs them once. ``frequencies`` are the
    counts they were weighed with, the ``prior`` given to ``weigh`` included.
    """

    words: list[tuple[tuple[str, float], ...]]
    top: float
    frequencies: Frequencies


def weigh(
    candidates: Sequence[Candidate], sources: Sequence[Source], prior: Frequencies | None = None
) -> Weights:
    """A word is worth log(sources / sources holding it), a specific one log(sources),
    the most any can be: rare words carry the news. A model's words count
    ``MODEL_WEIGHT`` of that. Sources are those read before (``prior``) and the
    given ones not ``counted`` in it."""
    in_source = dict.fromkeys(
        (c.source, w) for c in candidates if not sources[c.source].counted for w in c.words
    )
    df: Counter[str] = Counter(prior.df if prior is not None else {})
    df.update(w for _, w in in_source)
    read = (prior.sources if prior is not None else 0) + sum(not s.counted for s in sources)
    frequencies = Frequencies(read, dict(df))
    n = read + 1
    top = math.log(n)
    specific = frequencies.specific()
    weight = {w: top if d <= specific else math.log(n / d) for w, d in df.items()}
    speaker = [MODEL_WEIGHT if s.speaker == MODEL_SPEAKER else 1.0 for s in sources]
    return Weights(
        [tuple((w, speaker[c.source] * weight.get(w, top)) for w in c.words) for c in candidates],
        top,
        frequencies,
    )


def select(
    candidates: Sequence[Candidate],
    sources: Sequence[Source],
    room: int,
    must_share: float,
    counter: TokenCounter,
    weights: Weights | None = None,
) -> dict[int, float]:
    """Greedy by new information per token (lazy: a gain only falls as words are kept).

    Returns the chosen candidates with the gain per token they were chosen at.
    Every float is summed in an order fixed by the input, so the same input
    gives the same choice in every process (no set is iterated). Selection
    stops once the cheapest candidate no longer fits: none after it could.
    ``weights`` are ``weigh(candidates, sources)``, computed when not given.
    """
    if weights is None:
        weights = weigh(candidates, sources)
    weighed, top = weights.words, weights.top
    covered: set[str] = set()
    kept_artifacts: set[str] = set()
    sessions: set[str | None] = {None}
    must_room = must_share * room
    cheapest = min((c.cost for c in candidates), default=0)
    used = 0

    def gain(i: int) -> float:
        c = candidates[i]
        value = sum([x for w, x in weighed[i] if w not in covered]) + c.bonus
        if not c.artifacts:
            return value
        new_artifacts = len(set(c.artifacts) - kept_artifacts)
        value += ARTIFACT_WEIGHT * top * new_artifacts
        if new_artifacts and used + c.cost <= must_room:
            value += MUST_WEIGHT * top
        return value

    heap = [(-gain(i) / c.cost, i) for i, c in enumerate(candidates)]
    heapq.heapify(heap)
    chosen: dict[int, float] = {}
    while heap and used + cheapest <= room:
        _, i = heapq.heappop(heap)
        c = candidates[i]
        fresh = gain(i)
        if all(w in covered for w in c.words) and kept_artifacts.issuperset(c.artifacts):
            continue
        if heap and fresh / c.cost < -heap[0][0] - 1e-12:
            heapq.heappush(heap, (-fresh / c.cost, i))
            continue
        session = sources[c.source].session
        cost = c.cost + (counter.text(session) + 1 if session and session not in sessions else 0)
        if used + cost > room:
            continue
        chosen[i] = fresh / c.cost
        used += cost
        sessions.add(session)
        covered.update(c.words)
        kept_artifacts.update(c.artifacts)
    return chosen


def compose(
    chosen: Iterable[int],
    candidates: Sequence[Candidate],
    sources: Sequence[Source],
    spare: Collection[int] = (),
) -> list[dict[str, Any]]:
    """Chosen pieces as lines in log order: one a source, adjacent pieces joined.

    Pieces also in ``spare`` make lines of their own, marked ``"spare": True``.
    """
    lines: list[dict[str, Any]] = []
    last: tuple[int, bool] = (-1, False)
    last_index = -2
    for i in sorted(chosen):
        c = candidates[i]
        source = sources[c.source]
        here = (c.source, i in spare)
        if here == last:
            joiner = " " if i == last_index + 1 else " … "
            lines[-1]["text"] += joiner + c.text
        else:
            lines.append(
                {
                    "session": source.session,
                    "speaker": source.speaker,
                    "role": "user" if source.user else "other" if source.prose else "tool",
                    "text": c.text,
                }
            )
            if here[1]:
                lines[-1]["spare"] = True
        last, last_index = here, i
    return lines


# A block starts after a blank line with ``[speaker]: `` or a label such as ``Round 3: ``.
_BLOCK = re.compile(r"\n{2,}(?=[ \t]*(?:\[[^\]\n]{1,80}\]|[A-Z][\w ]{0,30}):[ \t])")
_SPEAKER = re.compile(r"[ \t]*\[([^\]\n]{1,80})\]: ")


def key_sentences(
    text: str, max_tokens: int, counter: TokenCounter, *, must_share: float = 0.25
) -> str:
    """The most informative sentences of ``text`` within ``max_tokens``, in order.

    The selector of ``ExtractiveSummary`` applied to free text, so a model-free
    stand-in answers with the same choice of sentences and must-keep items.
    Transcript blocks (``[role]: text``, see ``strategies.transcript``) keep
    their speaker; text without such blocks is read paragraph by paragraph.
    """
    sources = _text_sources(text)
    candidates = candidates_of(sources, counter)
    chosen = select(candidates, sources, max_tokens, must_share, counter)
    out = _plain(chosen, candidates, sources)
    while counter.text(out) > max_tokens and chosen:
        weakest = min(chosen, key=lambda i: (chosen[i], -i))
        del chosen[weakest]
        out = _plain(chosen, candidates, sources)
    return out


def _text_sources(text: str) -> list[Source]:
    blocks = _BLOCK.split(text.strip())
    if len(blocks) == 1 and not _SPEAKER.match(blocks[0]):
        blocks = re.split(r"\n\s*\n", blocks[0])
    out: list[Source] = []
    for block in blocks:
        match = _SPEAKER.match(block)
        speaker = match.group(1) if match else ""
        body = block[match.end() :] if match else block
        if body.strip():
            role = speaker.split(" ")[0]
            out.append(Source(None, speaker, body, role == "user", prose=role != "tool"))
    return out


def _plain(
    chosen: Iterable[int], candidates: Sequence[Candidate], sources: Sequence[Source]
) -> str:
    return "\n".join(
        f"{line['speaker']}: {line['text']}" if line["speaker"] else line["text"]
        for line in compose(chosen, candidates, sources)
    )
