"""Salience: which sentences of a text carry the most information per token.

Sentences are chosen greedily for what they add per token: each specific
content word (one that few sources use) is worth the most a word can be, a
commoner one its rarity (inverse document frequency over sources), a word
already kept is worth nothing again (no redundancy), and names, numbers and
relative times weigh more. An unnamed assistant's words (a model's, which it
can say again) weigh less than a person's or a tool's. Sentences carrying must-keep
items (``contextfold.core.artifacts``: paths, URLs, identifiers, numbers, dates,
error lines, a user's constraints) go first, up to ``must_share`` of the room,
so a tight budget still leaves room for prose. Kept sentences stay whole (only
overlong ones are cut into clauses) and in order, prefixed with their speaker.

``ExtractiveSummary`` (``strategies.extractive``) folds rounds with this
selector and the offline stand-in model (``llm.offline``) answers with it
(``key_sentences``), so both choose the same sentences and must-keep items.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from contextfold.core.artifacts import (
    TOKEN_KINDS,
    find_artifacts,
    is_constraint,
    is_error_line,
    sentences,
)
from contextfold.core.tokens import TokenCounter

MAX_SENTENCE_TOKENS = 60
# Texts whose candidates are kept between calls (a refold re-reads the lines kept before).
READ_CACHE = 4096
PIECE_CHARS = 4 * MAX_SENTENCE_TOKENS
# Extra worth, in units of one word's rarity: a name or number mid-sentence, a
# relative time ("last week") that the session date resolves, an artifact
# (weighed as a word seen once).
NAME_BONUS = 0.5
TIME_BONUS = 1.0
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
_WORD = re.compile(r"[a-z0-9]+")
_CAPITALIZED = re.compile(r"(?<=[\w,;:] )[A-Z][a-z]+")
_RELATIVE_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|last (?:week|weekend|month|year|night"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|next (?:week|month|year)"
    r"|this (?:week|weekend|month|year))\b",
    re.IGNORECASE,
)
_CLAUSE = re.compile(r"(?<=[,;:])\s+|\s+(?=[-\u2013\u2014]\s)")
_STOPWORD_TEXT = """a about above after again against all also am an and any are aren as at be because
    been before being below between both but by can could did didn do does doesn doing don
    down during each else even ever few for from further get gets got had hadn has hasn have
    haven having he her here hers herself him himself his how i if in into is isn it its
    itself just ll me more most much my myself no nor not now of off on once only or other
    our ours ourselves out over own re really same shan she should shouldn so some still such
    than that the their theirs them themselves then there these they this those through to too
    under until up us ve very was wasn we were weren what when where which while who whom why
    will with won would wouldn yeah yes you your yours yourself yourselves oh wow hey hi ok
    okay thanks thank lot lots gonna wanna sure great good nice awesome cool glad"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass(frozen=True)
class Source:
    """One message (or one line of an earlier fold) that sentences are taken from.

    ``session`` is the header the source's lines go under (a date, a session
    id, or None); ``user`` marks a user's text, whose constraints must be kept;
    ``counted`` marks a source whose words the ``Frequencies`` given to ``weigh``
    already count (an earlier fold's line, read before as a message).
    """

    session: str | None
    speaker: str
    text: str
    user: bool
    counted: bool = False


@dataclass(frozen=True)
class Candidate:
    """A sentence (or clause) of ``Source`` number ``source``, scored for selection.

    ``words`` are its content words, each once in the order they occur (a tuple,
    not a set: gains add floats over them, and a set's order changes with the
    hash seed), ``artifacts`` its must-keep items, ``cost`` its tokens with a
    speaker prefix, ``bonus`` its extra worth (names, numbers, relative times).
    """

    source: int
    text: str
    words: tuple[str, ...]
    artifacts: tuple[str, ...]
    cost: int
    bonus: float


def candidates_of(sources: Sequence[Source], counter: TokenCounter) -> list[Candidate]:
    """Every sentence of ``sources`` (overlong ones as clauses) that has a content word.

    A text read once is not read again: tool outputs and greetings repeat, and
    its pieces are the same whatever source they come from. Nor is it read
    again by the next call (up to ``READ_CACHE`` texts): a fold re-reads the
    lines the one before it kept.
    """
    out: list[Candidate] = []
    read: dict[tuple[str, bool, bool], tuple[Candidate, ...]] = {}
    for index, source in enumerate(sources):
        prefix = counter.text(f"{source.speaker}: ") + 1
        key = (source.text, source.user, bool(source.session))
        pieces = read.get(key)
        if pieces is None:
            pieces = read[key] = _read(*key, counter)
        out.extend(
            Candidate(index, c.text, c.words, c.artifacts, prefix + c.cost, c.bonus) for c in pieces
        )
    return out


@lru_cache(maxsize=READ_CACHE)
def _read(text: str, user: bool, dated: bool, counter: TokenCounter) -> tuple[Candidate, ...]:
    """The candidates of a source's ``text`` (``user``'s, under a session date when
    ``dated``), with ``source`` unset and ``cost`` without the prefix."""
    out: list[Candidate] = []
    for _, sentence in sentences(text):
        for piece in _pieces(sentence, counter):
            found = _WORD.findall(piece.lower())
            words = tuple(dict.fromkeys(w for w in found if w not in _STOPWORDS))
            if not words:
                continue
            names = {w.lower() for w in _CAPITALIZED.findall(piece)}
            named = sum(w in names or w.isdigit() for w in words)
            artifacts = [a.text for a in find_artifacts(piece, TOKEN_KINDS)]
            if is_error_line(piece) or (user and is_constraint(piece)):
                artifacts.append(piece)
            out.append(
                Candidate(
                    source=-1,
                    text=piece,
                    words=words,
                    artifacts=tuple(artifacts),
                    cost=counter.text(piece),
                    bonus=NAME_BONUS * named
                    + (TIME_BONUS if dated and _RELATIVE_TIME.search(piece) else 0),
                )
            )
    return tuple(out)


def _pieces(sentence: str, counter: TokenCounter) -> list[str]:
    """A sentence, or its clauses when it is too long to be worth its cost whole.

    Clauses are packed by characters (about four a token), not by counting,
    so a tool output with one enormous line costs linear time.
    """
    if len(sentence) <= PIECE_CHARS or counter.text(sentence) <= MAX_SENTENCE_TOKENS:
        return [sentence]
    out: list[str] = []
    for clause in _CLAUSE.split(sentence):
        chunk = ""
        for word in clause.split():
            if len(word) > PIECE_CHARS:
                word = word[: PIECE_CHARS - 1] + "\u2026"
            if chunk and len(chunk) + 1 + len(word) > PIECE_CHARS:
                out.append(chunk)
                chunk = ""
            chunk = f"{chunk} {word}" if chunk else word
        if chunk:
            out.append(chunk)
    return out


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
                    "role": "user" if source.user else "other",
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
            out.append(Source(None, speaker, body, speaker.split(" ")[0] == "user"))
    return out


def _plain(
    chosen: Iterable[int], candidates: Sequence[Candidate], sources: Sequence[Source]
) -> str:
    return "\n".join(
        f"{line['speaker']}: {line['text']}" if line["speaker"] else line["text"]
        for line in compose(chosen, candidates, sources)
    )
