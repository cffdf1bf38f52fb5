"""Extractive summary: old rounds folded into their most informative sentences.

No model is called, so the ``offline`` preset works anywhere and the fold has
the same shape a model's rolling summary will have: one ``summary`` fold over
rounds ``1..N`` whose text starts with ``[Conversation History Summary (Rounds
1-N)]``, superseded by the next one (incremental: the new fold re-selects from
the old fold's sentences plus the rounds folded since).

Sentences are chosen by ``contextfold.extract.salience`` for what they add per token,
must-keep items first (up to ``must_share`` of the fold). Kept sentences stay
in log order, prefixed with their speaker, under the date of their session, so
the fold reads as prose and "last week" can be placed in time; prose sentences
without a must-keep item are quoted without their filler words ("oh", "really"). Message meta is
read for session dates and ids only.

Sizing follows the budget's low-water mark, which a cycle folds the view
down to: the newest closed rounds stay verbatim while they fit the working
set's share of it (``strategies.working_set``: ``recent_share`` when given,
else the share of the view's ``kind``, read from the view when not given: a
tenth for a chat, half for an agent), and the fold text gets what is left.
Only a fold the budget did not ask for (another trigger fired below the
high-water mark, or there is no budget) is cut to ``ratio`` of what it covers.

A conversation compacted as it arrives is folded again and again, each fold
choosing from the last one's sentences and the rounds since; to choose as one
fold of everything would, a fold carries in its data what the next needs and
no reader sees: the word counts over every message it read (``frequencies``:
counted over its own few sources, a word the whole conversation keeps using
would look as specific as a name said once) and ``spare`` sentences, the next
best up to ``spare`` times its room, so a sentence weighed low early (its
words looked common among the few messages read then) can come back once
more of the conversation shows them to be rare.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.entries import Entry
from contextfold.core.folds import Fold, unlabelled
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import TokenCounter
from contextfold.extract.candidates import Candidate, Source, candidates_of
from contextfold.extract.salience import Frequencies, compose, select, weigh
from contextfold.llm.base import LLM
from contextfold.strategies.base import Job, ViewState, job_for, label_tokens, one_message_fold
from contextfold.strategies.triggers import OverBudget, Trigger
from contextfold.strategies.working_set import Kind, check, kind_and_share, rounds_before

SUMMARIZED = "[SUMMARIZED]"
_TIME_OF_DAY = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]\.?m\.?)?(?:\s+on\b)?", re.I)
PREAMBLE = "Key sentences of these rounds, in order, filler words left out; the full log keeps every message."
REFILLS = 2


@dataclass
class ExtractiveSummary:
    """Fold old closed rounds into their key sentences; the newest stay verbatim.

    The fold's message has role ``user``: its sentences are quotes of what
    users, assistants and tools said, so they keep the trust of conversation
    text instead of gaining a system prompt's authority, and providers that
    take system text only at the top (Anthropic, Gemini) accept it in place.
    ``spare`` sizes the sentences kept, unshown, for the next fold to choose
    from again, as a share of the most room a fold gets.
    """

    recent_share: float | None = None
    kind: Kind | None = None
    keep_rounds: int = 1
    ratio: float = 0.25
    min_tokens: int = 64
    must_share: float = 0.25
    spare: float = 1.0
    trigger: Trigger = field(default_factory=OverBudget)
    name: str = "extractive"

    def __post_init__(self) -> None:
        check(self.kind, self.recent_share)

    def plan(self, state: ViewState) -> Job | None:
        if not self.trigger(state):
            return None
        job = self._plan(state, self.keep_rounds)
        if job is None and state.over_budget:
            # The newest rounds alone are over budget: fold them too, into this fold,
            # rather than leave the view to the rescue (whose fold this one cannot read).
            # Not the round of the latest user message, which render must show.
            user = state.latest_user
            newest = sum(
                1 for r in state.rounds if r.closed and user is not None and r.last >= user
            )
            if newest < self.keep_rounds:
                job = self._plan(state, newest)
        return job

    def _plan(self, state: ViewState, keep_rounds: int) -> Job | None:
        closed = [r for r in state.rounds if r.closed]
        foldable = len(closed) - max(keep_rounds, 0)
        if foldable <= 0:
            return None
        sums = [0]
        for entry in state.entries:
            sums.append(sums[-1] + entry.tokens)

        def after(k: int) -> int:
            return sums[-1] - sums[closed[k - 1].last + 1]

        k = foldable
        kind, share = kind_and_share(state, self.kind, self.recent_share)
        if state.budget is None:
            target = pool = math.ceil(self.ratio * sums[closed[k - 1].last + 1])
        else:
            room = state.low_mark(state.budget) - (state.tokens - sums[-1])
            k = rounds_before(state, share, keep_rounds)
            while room - after(k) < self.min_tokens and k < foldable:
                k += 1
            target = max(room - after(k), self.min_tokens)
            pool = max(room, target)
            # Below the high mark the budget did not ask for this fold (another trigger
            # did): it takes ``ratio`` of what it covers. Above, the low mark sizes it.
            if not state.above_high_water:
                target = min(target, math.ceil(self.ratio * sums[closed[k - 1].last + 1]))
        last = closed[k - 1].last
        before = sums[last + 1]
        head = state.entries[0].fold
        refold = last == 0 and head is not None
        if before <= target or (refold and not state.over_budget):
            return None
        rounds = sum(_rounds_in(state.entries[r.first]) for r in closed[:k])
        return job_for(
            self.name, state, 0, last, target=target, rounds=rounds, pool=pool, kind=kind
        )

    def run(self, job: Job, llm: LLM, counter: TokenCounter) -> Sequence[Fold]:
        target: int = job.params["target"] - label_tokens(job, counter)
        rounds: int = job.params["rounds"]
        header = f"[Conversation History Summary (Rounds 1-{rounds})]\n{SUMMARIZED} {PREAMBLE}"
        probe: Message = {"role": "user", "content": header}
        room = target - counter.message(probe)
        sources, prior = _sources(job.entries, self.name)
        candidates = candidates_of(sources, counter)
        weights = weigh(candidates, sources, prior)
        chosen = select(candidates, sources, room, self.must_share, counter, weights)
        lines, message, tokens_after = _message(header, chosen, candidates, sources, counter)
        for _ in range(REFILLS):
            # The estimate pays a speaker prefix a piece; joined lines cost less.
            if target - tokens_after < self.min_tokens // 4:
                break
            room += target - tokens_after
            chosen = select(candidates, sources, room, self.must_share, counter, weights)
            lines, message, tokens_after = _message(header, chosen, candidates, sources, counter)
        while tokens_after > target and chosen:
            weakest = min(chosen, key=lambda i: (chosen[i], -i))
            del chosen[weakest]
            lines, message, tokens_after = _message(header, chosen, candidates, sources, counter)
        kept = [a for i in chosen for a in candidates[i].artifacts]
        every = {a for c in candidates for a in c.artifacts}
        # Spare sentences are sized by the most room a fold gets (``pool``: the low-water
        # mark with nothing verbatim beside it), not by this fold's: a fold squeezed by
        # one long round still keeps what the next, roomier one can bring back.
        pool: int = job.params.get("pool", target)
        wider = select(
            candidates,
            sources,
            room + math.ceil(self.spare * max(pool, room)),
            self.must_share,
            counter,
            weights,
        )
        spare = [i for i in wider if i not in chosen]
        carried = weights.frequencies.carried(
            w for i in [*chosen, *spare] for w in candidates[i].words
        )
        return [
            one_message_fold(
                job,
                self.name,
                message,
                counter,
                kind="summary",
                data={
                    "rounds": [1, rounds],
                    "kind": job.params.get("kind"),
                    "sentences": len(chosen),
                    "artifacts": list(dict.fromkeys(kept)),
                    "artifacts_dropped": len(every - set(kept)),
                    "lines": lines,
                    "spare": _spare_lines(
                        compose([*chosen, *spare], candidates, sources, set(spare))
                    ),
                    "frequencies": {"sources": carried.sources, "df": carried.df},
                },
            )
        ]


def _rounds_in(entry: Entry) -> int:
    """Rounds an entry opening a round stands for: an earlier summary's count, else one."""
    span = entry.fold.data.get("rounds") if entry.fold is not None else None
    if isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span):
        return max(int(span[1]) - int(span[0]) + 1, 1)
    return 1


def _sources(entries: Sequence[Entry], strategy: str) -> tuple[list[Source], Frequencies | None]:
    """The entries' messages, an earlier fold's lines in their place, and the word
    counts that fold carried over the messages it read (None when none did)."""
    out: list[Source] = []
    prior: Frequencies | None = None
    for entry in entries:
        fold = entry.fold
        if (
            fold is not None
            and fold.strategy == strategy
            and isinstance(fold.data.get("lines"), list)
        ):
            carried = _frequencies(fold.data.get("frequencies"))
            if carried is not None:
                prior = carried if prior is None else _sum(prior, carried)
            out.extend(
                Source(
                    line.get("session"),
                    str(line["speaker"]),
                    str(line["text"]),
                    line.get("role") == "user",
                    counted=carried is not None,
                    prose=line.get("role") != "tool",
                )
                for line in _pool(fold.data["lines"], fold.data.get("spare"))
            )
            continue
        for message in entry.messages if fold is None else map(unlabelled, entry.messages):
            text = text_of(message)
            if text.strip():
                out.append(
                    Source(
                        _session_of(message),
                        str(message.get("name") or message["role"]),
                        text,
                        message["role"] == "user",
                        prose=message["role"] != "tool",
                    )
                )
    return out, prior


def _spare_lines(pool: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spare lines of ``pool``, each with how many kept lines go before it."""
    out: list[dict[str, Any]] = []
    before = 0
    for line in pool:
        if line.pop("spare", False):
            out.append({**line, "after": before})
        else:
            before += 1
    return out


def _pool(lines: Sequence[dict[str, Any]], spare: Any) -> list[dict[str, Any]]:
    """A fold's kept lines with its spare ones back in their places (log order)."""
    extra = [s for s in spare if isinstance(s, dict)] if isinstance(spare, list) else []
    out: list[dict[str, Any]] = []
    j = 0
    for k, line in enumerate(lines):
        while j < len(extra) and int(extra[j].get("after", 0)) <= k:
            out.append(extra[j])
            j += 1
        out.append(line)
    out.extend(extra[j:])
    return out


def _frequencies(data: Any) -> Frequencies | None:
    """A fold's ``frequencies`` (absent from folds made before they were kept)."""
    if not isinstance(data, dict):
        return None
    sources, df = data.get("sources"), data.get("df")
    if not isinstance(sources, int) or not isinstance(df, dict):
        return None
    return Frequencies(sources, {str(w): int(d) for w, d in df.items()})


def _sum(a: Frequencies, b: Frequencies) -> Frequencies:
    df = dict(a.df)
    for w, d in b.df.items():
        df[w] = df.get(w, 0) + d
    return Frequencies(a.sources + b.sources, df)


def _session_of(message: Message) -> str | None:
    """A session header from the only meta a strategy may read: session date, else id
    (LoCoMo's ``session_date_time`` / ``session``, LongMemEval's ``session_date`` /
    ``session_id``). The date without its time of day: a header is paid for by the
    first line under it, and the hour is rarely what is asked (on the tuning half,
    LoCoMo at 10%, retention of questions other than temporal 0.338 with the hour,
    0.354 without)."""
    meta = message.get("meta") or {}
    date = meta.get("session_date_time") or meta.get("session_date")
    session = meta.get("session", meta.get("session_id"))
    if date:
        return f"{_TIME_OF_DAY.sub('', str(date)).strip()}:"
    if session is not None:
        return f"Session {session}:"
    return None


def _message(
    header: str,
    chosen: Iterable[int],
    candidates: Sequence[Candidate],
    sources: Sequence[Source],
    counter: TokenCounter,
) -> tuple[list[dict[str, Any]], Message, int]:
    lines = compose(chosen, candidates, sources)
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
