"""Answer-recall retention: how much of what is later asked survives compaction.

- Words are lowercase alphanumeric runs; ``STOPWORDS`` are left out.
- A question's key words are the words of its gold answer that are not
  stopwords, not in the question, and occur in at most max(3, 1% of) the
  conversation's messages: the specific, rare words an answer needs.
  Questions without key words are skipped.
- Recall of a text is the share of a question's key words it contains.
  Retention is the mean recall over questions in the prompt divided by the
  mean recall over questions in the full conversation, pooled over conversations.
- Without date gains (``dateless``): a question's key words less its answer's
  date words (months, weekdays, years, "week", "ago", days of a month beside a month or in a
  numeric date, "yesterday"...). A fold that prints session dates (meta the
  messages' text lacks) gains on every "when" question; scored dateless, only
  what it keeps of the conversation's content counts.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextfold.core.messages import Message, text_of

_STOPWORD_TEXT = """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t d ll m re ve don didn doesn isn wasn"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[a-z0-9]+")
_MONTHS = (
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec"
)
_DAYS = "monday tuesday wednesday thursday friday saturday sunday"
_RELATIVE_DAYS = "yesterday today tomorrow tonight ago week weeks weekend month months year years"
DATE_WORDS = frozenset(f"{_MONTHS} {_DAYS} {_RELATIVE_DAYS}".split())
_MONTH = rf"(?:{'|'.join(_MONTHS.split())})"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_DATE = re.compile(
    rf"\b(?:{_DAY}(?:\s+of)?\s+{_MONTH}|{_MONTH}\s+{_DAY}\b"
    r"|\d{1,4}[-/.]\d{1,2}(?:[-/.]\d{1,4})?|(?:1[89]|20)\d{2})",
    re.IGNORECASE,
)


def word_set(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def date_words(text: str) -> set[str]:
    """The words of ``text`` that say a date: month, weekday and relative-day names, and
    the words of dates written out ("7 May", "May 7th", "2023", "2023-05-07")."""
    found = {w for w in word_set(text) if w in DATE_WORDS}
    for match in _DATE.finditer(text):
        found |= word_set(match.group())
    return found


def dateless(keys: set[str], answer: str) -> set[str]:
    """``keys`` less the date words of ``answer`` (empty: the answer is only a date)."""
    return keys - date_words(answer)


def key_words(question: Mapping[str, Any], df: Counter[str], limit: float) -> set[str]:
    """The rare words of ``question``'s gold answer that the question does not give away."""
    asked = word_set(str(question["question"]))
    return {
        w
        for w in word_set(str(question["answer"]))
        if w not in STOPWORDS and w not in asked and df[w] <= limit
    }


def keyed_questions(
    messages: Sequence[Message], questions: Iterable[Mapping[str, Any]]
) -> list[tuple[Mapping[str, Any], set[str]]]:
    """Each question with a gold answer and its key words over the whole conversation;
    questions with no key word are left out."""
    df = Counter(w for m in messages for w in word_set(text_of(m)))
    limit = max(3.0, 0.01 * len(messages))
    return [
        (q, keys) for q in questions if "answer" in q for keys in [key_words(q, df, limit)] if keys
    ]


def answer_keys(
    messages: Sequence[Message], questions: Iterable[Mapping[str, Any]]
) -> list[set[str]]:
    """The key words of ``keyed_questions``, alone."""
    return [keys for _, keys in keyed_questions(messages, questions)]


def recall(keys: set[str], vocabulary: set[str]) -> float:
    return len(keys & vocabulary) / len(keys)


def prompt_words(messages: Iterable[Message]) -> set[str]:
    return word_set("\n".join(text_of(m) for m in messages))


def retention(prompt_recalls: Sequence[float], full_recalls: Sequence[float]) -> float | None:
    """Mean recall in the prompt over mean recall in the full conversation (None: no
    question, or the full conversation holds none of the answers' key words)."""
    if not prompt_recalls or not full_recalls:
        return None
    full = statistics.fmean(full_recalls)
    return statistics.fmean(prompt_recalls) / full if full else None
