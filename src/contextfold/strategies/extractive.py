"""Extractive summary: old rounds folded into their most informative sentences.

No model is called, so the ``offline`` preset works anywhere and the fold has
the same shape a model's rolling summary will have: one ``summary`` fold over
rounds ``1..N`` whose text starts with ``[Conversation History Summary (Rounds
1-N)]``, superseded by the next one (incremental: the new fold re-selects from
the old fold's sentences plus the rounds folded since).

Sentences are chosen greedily for what they add per token: each content word
is worth its rarity in the folded rounds (inverse document frequency over
messages), a word already kept is worth nothing again (no redundancy), and
names, numbers and relative times weigh more. Sentences carrying must-keep
items (``contextfold.artifacts``: paths, URLs, identifiers, numbers, dates,
error lines, a user's constraints) go first, up to ``must_share`` of the fold,
so a tight budget still leaves room for prose. Kept sentences stay whole (only
overlong ones are cut into clauses) and in log order, prefixed with their
speaker, under the date of their session, so the fold reads as prose and "last
week" can be placed in time. Message meta is read for session dates and ids
only.

Sizing follows the budget: the newest closed rounds stay verbatim while they
fit ``recent_share`` of it, and the fold text gets what is left.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.artifacts import (
    TOKEN_KINDS,
    find_artifacts,
    is_constraint,
    is_error_line,
    sentences,
)
from contextfold.entries import Entry
from contextfold.folds import Fold
from contextfold.messages import Message, text_of
from contextfold.strategies.base import Job, ViewState, job_for
from contextfold.strategies.triggers import OverBudget, Trigger
from contextfold.tokens import TokenCounter

SUMMARIZED = "[SUMMARIZED]"
PREAMBLE = "Key sentences of these rounds, verbatim and in order; the full log keeps every message."
MAX_SENTENCE_TOKENS = 60
PIECE_CHARS = 4 * MAX_SENTENCE_TOKENS
REFILLS = 2
# Extra worth, in units of one word's rarity: a name or number mid-sentence, a
# relative time ("last week") that the session date resolves, an artifact
# (weighed as a word seen once).
NAME_BONUS = 0.5
TIME_BONUS = 1.0
ARTIFACT_WEIGHT = 1.0
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


@dataclass
class ExtractiveSummary:
    """Fold old closed rounds into their key sentences; the newest stay verbatim.

    The fold's message has role ``user``: its sentences are quotes of what
    users, assistants and tools said, so they keep the trust of conversation
    text instead of gaining a system prompt's authority, and providers that
    take system text only at the top (Anthropic, Gemini) accept it in place.
    """

    recent_share: float = 0.3
    keep_rounds: int = 1
    ratio: float = 0.25
    min_tokens: int = 64
    must_share: float = 0.25
    trigger: Trigger = field(default_factory=OverBudget)
    name: str = "extractive"

    def plan(self, state: ViewState) -> Job | None:
        if not self.trigger(state):
            return None
        closed = [r for r in state.rounds if r.closed]
        foldable = len(closed) - max(self.keep_rounds, 0)
        if foldable <= 0:
            return None
        sums = [0]
        for entry in state.entries:
            sums.append(sums[-1] + entry.tokens)

        def after(k: int) -> int:
            return sums[-1] - sums[closed[k - 1].last + 1]

        k = foldable
        if state.budget is None:
            target = math.ceil(self.ratio * sums[closed[k - 1].last + 1])
        else:
            room = state.budget - (state.tokens - sums[-1])
            k = next((n for n in range(1, foldable + 1) if after(n) <= self.recent_share * room), k)
            while room - after(k) < self.min_tokens and k < foldable:
                k += 1
            target = max(room - after(k), self.min_tokens)
            if not state.over_budget:
                target = min(target, math.ceil(self.ratio * sums[closed[k - 1].last + 1]))
        last = closed[k - 1].last
        before = sums[last + 1]
        head = state.entries[0].fold
        refold = last == 0 and head is not None
        if before <= target or (refold and not state.over_budget):
            return None
        rounds = sum(_rounds_in(state.entries[r.first]) for r in closed[:k])
        return job_for(self.name, state, 0, last, target=target, rounds=rounds)

    def run(self, job: Job, llm: Any, counter: TokenCounter) -> Sequence[Fold]:
        target: int = job.params["target"]
        rounds: int = job.params["rounds"]
        header = f"[Conversation History Summary (Rounds 1-{rounds})]\n{SUMMARIZED} {PREAMBLE}"
        probe: Message = {"role": "user", "content": header}
        room = target - counter.message(probe)
        sources = _sources(job.entries, self.name)
        candidates = _candidates(sources, counter)
        chosen = _select(candidates, sources, room, self.must_share, counter)
        lines, message, tokens_after = _message(header, chosen, candidates, sources, counter)
        for _ in range(REFILLS):
            # The estimate pays a speaker prefix a piece; joined lines cost less.
            if target - tokens_after < self.min_tokens // 4:
                break
            room += target - tokens_after
            chosen = _select(candidates, sources, room, self.must_share, counter)
            lines, message, tokens_after = _message(header, chosen, candidates, sources, counter)
        while tokens_after > target and chosen:
            weakest = min(chosen, key=lambda i: (chosen[i], -i))
            del chosen[weakest]
            lines, message, tokens_after = _message(header, chosen, candidates, sources, counter)
        text = message["content"]
        kept = [a for i in chosen for a in candidates[i].artifacts]
        every = {a for c in candidates for a in c.artifacts}
        return [
            Fold(
                view=job.view,
                start=job.start,
                end=job.end,
                kind="summary",
                text=text,
                messages=(message,),
                strategy=self.name,
                tokens_before=job.tokens_before,
                tokens_after=tokens_after,
                data={
                    "rounds": [1, rounds],
                    "sentences": len(chosen),
                    "artifacts": list(dict.fromkeys(kept)),
                    "artifacts_dropped": len(every - set(kept)),
                    "lines": lines,
                },
            )
        ]


@dataclass(frozen=True)
class _Source:
    """One message (or one line of an earlier fold) that sentences are taken from."""

    session: str | None
    speaker: str
    text: str
    user: bool


@dataclass
class _Candidate:
    source: int
    text: str
    words: frozenset[str]
    artifacts: tuple[str, ...]
    cost: int
    bonus: float


def _rounds_in(entry: Entry) -> int:
    """Rounds an entry opening a round stands for: an earlier summary's count, else one."""
    span = entry.fold.data.get("rounds") if entry.fold is not None else None
    if isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span):
        return max(int(span[1]) - int(span[0]) + 1, 1)
    return 1


def _sources(entries: Sequence[Entry], strategy: str) -> list[_Source]:
    out: list[_Source] = []
    for entry in entries:
        fold = entry.fold
        if (
            fold is not None
            and fold.strategy == strategy
            and isinstance(fold.data.get("lines"), list)
        ):
            out.extend(
                _Source(
                    line.get("session"),
                    str(line["speaker"]),
                    str(line["text"]),
                    line.get("role") == "user",
                )
                for line in fold.data["lines"]
            )
            continue
        for message in entry.messages:
            text = text_of(message)
            if text.strip():
                out.append(
                    _Source(
                        _session_of(message),
                        str(message.get("name") or message["role"]),
                        text,
                        message["role"] == "user",
                    )
                )
    return out


def _session_of(message: Message) -> str | None:
    """A session header from the only meta a strategy may read: session date, else id."""
    meta = message.get("meta") or {}
    date, session = meta.get("session_date_time"), meta.get("session")
    if date:
        return f"{date}:"
    if session is not None:
        return f"Session {session}:"
    return None


def _candidates(sources: Sequence[_Source], counter: TokenCounter) -> list[_Candidate]:
    out: list[_Candidate] = []
    for index, source in enumerate(sources):
        prefix = counter.text(f"{source.speaker}: ") + 1
        for _, sentence in sentences(source.text):
            for piece in _pieces(sentence, counter):
                words = frozenset(w for w in _WORD.findall(piece.lower()) if w not in _STOPWORDS)
                if not words:
                    continue
                bonus_words = {w.lower() for w in _CAPITALIZED.findall(piece)}
                bonus_words.update(w for w in words if w.isdigit())
                artifacts = [a.text for a in find_artifacts(piece, TOKEN_KINDS)]
                if is_error_line(piece) or (source.user and is_constraint(piece)):
                    artifacts.append(piece)
                out.append(
                    _Candidate(
                        source=index,
                        text=piece,
                        words=words,
                        artifacts=tuple(artifacts),
                        cost=prefix + counter.text(piece),
                        bonus=NAME_BONUS * len(bonus_words & words)
                        + (TIME_BONUS if source.session and _RELATIVE_TIME.search(piece) else 0),
                    )
                )
    return out


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


def _select(
    candidates: Sequence[_Candidate],
    sources: Sequence[_Source],
    room: int,
    must_share: float,
    counter: TokenCounter,
) -> dict[int, float]:
    """Greedy by new information per token (lazy: a gain only falls as words are kept).

    Returns the chosen candidates with the gain per token they were chosen at.
    """
    per_source: dict[int, set[str]] = {}
    for c in candidates:
        per_source.setdefault(c.source, set()).update(c.words)
    df: Counter[str] = Counter(w for words in per_source.values() for w in words)
    n = len(sources) + 1
    weight = {w: math.log(n / d) for w, d in df.items()}
    top = math.log(n)
    covered: set[str] = set()
    kept_artifacts: set[str] = set()
    sessions: set[str | None] = {None}
    must_room = must_share * room
    used = 0

    def gain(c: _Candidate) -> float:
        value = sum(weight[w] for w in c.words - covered) + c.bonus
        new_artifacts = len(set(c.artifacts) - kept_artifacts)
        value += ARTIFACT_WEIGHT * top * new_artifacts
        if new_artifacts and used + c.cost <= must_room:
            value += MUST_WEIGHT * top
        return value

    heap = [(-gain(c) / c.cost, i) for i, c in enumerate(candidates)]
    heapq.heapify(heap)
    chosen: dict[int, float] = {}
    while heap:
        _, i = heapq.heappop(heap)
        c = candidates[i]
        fresh = gain(c)
        if not (c.words - covered or set(c.artifacts) - kept_artifacts):
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
        covered |= c.words
        kept_artifacts.update(c.artifacts)
    return chosen


def _compose(
    chosen: Iterable[int], candidates: Sequence[_Candidate], sources: Sequence[_Source]
) -> list[dict[str, Any]]:
    """Chosen pieces as lines in log order: one a source, adjacent pieces joined."""
    lines: list[dict[str, Any]] = []
    last_source, last_index = -1, -2
    for i in sorted(chosen):
        c = candidates[i]
        source = sources[c.source]
        if c.source == last_source:
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
        last_source, last_index = c.source, i
    return lines


def _message(
    header: str,
    chosen: Iterable[int],
    candidates: Sequence[_Candidate],
    sources: Sequence[_Source],
    counter: TokenCounter,
) -> tuple[list[dict[str, Any]], Message, int]:
    lines = _compose(chosen, candidates, sources)
    message: Message = {"role": "user", "content": "\n".join([header, *_lines_text(lines)])}
    return lines, message, counter.message(message)


def _lines_text(lines: Sequence[dict[str, Any]]) -> list[str]:
    """Lines as ``speaker: text``, each session's first one under its header."""
    out: list[str] = []
    session = None
    for line in lines:
        if line["session"] is not None and line["session"] != session:
            out.append(line["session"])
        session = line["session"]
        out.append(f"{line['speaker']}: {line['text']}")
    return out


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
    candidates = _candidates(sources, counter)
    chosen = _select(candidates, sources, max_tokens, must_share, counter)
    out = _plain(chosen, candidates, sources)
    while counter.text(out) > max_tokens and chosen:
        weakest = min(chosen, key=lambda i: (chosen[i], -i))
        del chosen[weakest]
        out = _plain(chosen, candidates, sources)
    return out


def _text_sources(text: str) -> list[_Source]:
    blocks = _BLOCK.split(text.strip())
    if len(blocks) == 1 and not _SPEAKER.match(blocks[0]):
        blocks = re.split(r"\n\s*\n", blocks[0])
    out: list[_Source] = []
    for block in blocks:
        match = _SPEAKER.match(block)
        speaker = match.group(1) if match else ""
        body = block[match.end() :] if match else block
        if body.strip():
            out.append(_Source(None, speaker, body, speaker.split(" ")[0] == "user"))
    return out


def _plain(
    chosen: Iterable[int], candidates: Sequence[_Candidate], sources: Sequence[_Source]
) -> str:
    return "\n".join(
        f"{line['speaker']}: {line['text']}" if line["speaker"] else line["text"]
        for line in _compose(chosen, candidates, sources)
    )
