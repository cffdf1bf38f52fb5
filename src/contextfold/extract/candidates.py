"""Candidates: the sentences of a conversation's messages, read once and scored for selection.

Each source (a message, or a line of an earlier fold) is cut into sentences
(``artifacts.sentences``), an overlong one into clauses; each keeps its content
words, its must-keep items (``artifacts``: paths, URLs, identifiers, numbers,
dates, error lines, a user's constraints) and its extra worth (names, numbers,
relative times). A piece of prose (not a tool's output) without a must-keep
item loses its filler words (``filler.terse``), so more facts fit a fold.
``salience`` chooses among them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from contextfold.core.tokens import TokenCounter
from contextfold.extract.artifacts import (
    TOKEN_KINDS,
    find_artifacts,
    is_constraint,
    is_error_line,
    sentences,
)
from contextfold.extract.filler import terse

MAX_SENTENCE_TOKENS = 60
# Texts whose candidates are kept between calls (a refold re-reads the lines kept before).
READ_CACHE = 4096
PIECE_CHARS = 4 * MAX_SENTENCE_TOKENS
# Extra worth, in units of one word's rarity: a name or number mid-sentence, a
# relative time ("last week") that the session date resolves.
NAME_BONUS = 0.5
TIME_BONUS = 1.0
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
    already count (an earlier fold's line, read before as a message);
    ``prose`` is False for a tool's output, whose words are all kept.
    """

    session: str | None
    speaker: str
    text: str
    user: bool
    counted: bool = False
    prose: bool = True


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
    read: dict[tuple[str, bool, bool, bool], tuple[Candidate, ...]] = {}
    for index, source in enumerate(sources):
        prefix = counter.text(f"{source.speaker}: ") + 1
        key = (source.text, source.user, bool(source.session), source.prose)
        pieces = read.get(key)
        if pieces is None:
            pieces = read[key] = _read(*key, counter)
        out.extend(
            Candidate(index, c.text, c.words, c.artifacts, prefix + c.cost, c.bonus) for c in pieces
        )
    return out


@lru_cache(maxsize=READ_CACHE)
def _read(
    text: str, user: bool, dated: bool, prose: bool, counter: TokenCounter
) -> tuple[Candidate, ...]:
    """The candidates of a source's ``text`` (``user``'s, under a session date when
    ``dated``, ``prose`` or a tool's output), with ``source`` unset and ``cost``
    without the prefix."""
    out: list[Candidate] = []
    for _, sentence in sentences(text):
        for whole in _pieces(sentence, counter):
            artifacts = [a.text for a in find_artifacts(whole, TOKEN_KINDS)]
            if is_error_line(whole) or (user and is_constraint(whole)):
                artifacts.append(whole)
            piece = terse(whole) if prose and not artifacts else whole
            found = _WORD.findall(piece.lower())
            words = tuple(dict.fromkeys(w for w in found if w not in _STOPWORDS))
            if not words:
                continue
            names = {w.lower() for w in _CAPITALIZED.findall(piece)}
            named = sum(w in names or w.isdigit() for w in words)
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
