"""Must-keep items: the parts of a text a summary may not lose.

A summary that drops a file path, a URL, an error line or a user's "never do
X" costs more than it saves, because the model then guesses. ``find_artifacts``
finds such items with regular expressions only, so it is deterministic, fast
and works offline. The extractive strategy keeps them; a model strategy can
check its summary with ``missing_artifacts`` and pin whatever went missing.

Kinds, in the order an overlap is settled (an earlier kind claims the span):
``url``, ``date``, ``time``, ``path``, ``money``, ``quantity``, ``ticket``,
``hex``, ``code`` (an upper-case code with digits: ``ZFA04Y``, ``HAT281``),
``identifier``, ``number`` (two digits or more: a lone digit is rarely worth
pinning). Two more kinds are whole lines or sentences and may contain the
others: ``error`` (tracebacks, ``Error:``, ``FAILED``, exit codes) and
``constraint`` (directives with don't, do not, must, never, always, should not,
only). The key of a JSON object (``"user_id":``) is never an item: it names a
field, it is not a fact.

``find_facts`` narrows the items to the facts a summary must keep
(``strategies.checked`` pins them): a value inside a JSON object carries its
key (``user_id: mia_li_3668``, ``price: 281``), and a bare number outside one
is no fact (``281`` alone tells a reader nothing).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

TOKEN_KINDS = (
    "url",
    "date",
    "time",
    "path",
    "money",
    "quantity",
    "ticket",
    "hex",
    "code",
    "identifier",
    "number",
)
KINDS = (*TOKEN_KINDS, "error", "constraint")

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_UNITS = (
    r"(?:%|percent|ms|msec|s|sec|secs|seconds?|mins?|minutes?|h|hrs?|hours?|days?|weeks?"
    r"|months?|years?|yrs?|kb|mb|gb|tb|kib|mib|gib|bytes?|tokens?|k|x|px|pt|em|rem"
    r"|mm|cm|m|km|mi|miles?|ft|feet|inch(?:es)?|kg|g|lbs?|pounds?|oz|ml|mph|kph"
    r"|km/h|fps|hz|khz|mhz|ghz|°c|°f|degrees?|cores?|threads?|gpus?|cpus?"
    r"|rows?|lines?|files?|items?|users?|requests?|req/s|rps|qps|times)"
)
_TOKEN_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("url", re.compile(r"\b(?:https?|ftp|file|ssh|git)://[^\s<>\"'`)\]]+|\bwww\.[^\s<>\"'`)\]]+")),
    (
        "date",
        re.compile(
            rf"\b(?:\d{{4}}-\d{{2}}-\d{{2}}(?:[T ]\d{{2}}:\d{{2}}(?::\d{{2}}(?:\.\d+)?)?Z?)?"
            rf"|\d{{1,2}}/\d{{1,2}}/\d{{2,4}}"
            rf"|{_DAY}\s+(?:of\s+)?{_MONTH}\.?(?:,?\s+\d{{4}})?"
            rf"|{_MONTH}\.?\s+{_DAY}(?:,?\s+\d{{4}})?"
            rf"|{_MONTH}\.?,?\s+\d{{4}})\b",
            re.IGNORECASE,
        ),
    ),
    (
        "time",
        re.compile(
            r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\.?)?(?!\w)|\b\d{1,2}\s?[ap]m\b", re.I
        ),
    ),
    (
        "path",
        re.compile(
            r"(?<![\w/.:@-])(?:[A-Za-z]:\\[^\s\"'`]+"
            r"|(?:~|\.{1,2})?/?(?:[\w@+-][\w.@+-]*/)+[\w.@+-]*[\w]"
            r"|[\w-]+\.(?:py|pyi|js|jsx|ts|tsx|json|jsonl|ya?ml|toml|ini|cfg|md|rst|txt|csv"
            r"|html?|css|sh|bash|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|sql|lock|log|env"
            r"|xml|ipynb|db|sqlite|gz|zip|tar|pdf|png|jpe?g|svg|gif))\b"
        ),
    ),
    (
        "money",
        re.compile(
            r"[$€£¥]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:k|m|bn|million|billion|thousand)\b)?"
            r"|\b\d[\d,]*(?:\.\d+)?\s?(?:dollars|euros|pounds sterling|usd|eur|gbp|bucks)\b",
            re.IGNORECASE,
        ),
    ),
    ("quantity", re.compile(rf"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?{_UNITS}(?![\w])", re.IGNORECASE)),
    ("ticket", re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b|(?<![\w&])#\d+\b")),
    (
        "hex",
        re.compile(
            r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
            r"|\b(?:0x)?(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,}\b",
            re.IGNORECASE,
        ),
    ),
    ("code", re.compile(r"\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z][A-Z0-9]{4,11}\b")),
    (
        "identifier",
        re.compile(
            r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b|\b_[A-Za-z0-9_]+\b"
            r"|\b[a-z]+(?:[A-Z][a-z0-9]*)+\b"
            r"|\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b"
            r"|\b[\w]+(?:\.[A-Za-z_]\w*)+\(\)?"
            r"|\b[A-Za-z_]\w*\(\)"
        ),
    ),
    ("number", re.compile(r"(?<![\w.])(?:\d{2,}|\d[.,]\d+)(?:[.,]\d+)*(?![\w])")),
)
_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b:|^\s*(?:E\s+)?\w*Error\b"
    r"|\bFAILED\b|\bFAIL:|\bERROR\b|\bfatal:|\bpanic:|\bSegmentation fault\b"
    r"|\bexit(?:ed)? (?:with )?(?:code|status) [1-9]\d*|\bnon-zero exit|\breturn code [1-9]"
    r"|\bcommand not found\b|\bNo such file or directory\b|\bPermission denied\b",
)
_ERROR_HINTS = (
    "Error",
    "Exception",
    "Traceback",
    "FAIL",
    "ERROR",
    "fatal:",
    "panic:",
    "Segmentation fault",
    "exit",
    "non-zero exit",
    "return code",
    "command not found",
    "No such file or directory",
    "Permission denied",
)
_ERROR_LINE_CHARS = 240
_CONSTRAINT_LEAD = r"(?:(?:please|and|but|so|also|just|then|ok|okay|remember|note)[,:]?\s+)*"
_NOT_ORDER = r"(?!\s+(?:had|has|been|was|were|here|there|thought|felt|knew|seen|did)\b)"
_CONSTRAINT = re.compile(
    rf"^\W*{_CONSTRAINT_LEAD}(?:don'?t|do not|never|always|only|make sure|avoid)\b{_NOT_ORDER}"
    r"|\b(?:must not|mustn'?t|should not|shouldn'?t|should never|should always|should only"
    r"|can ?not|may not|do not|don'?t|never|always|only)\s+(?:ever\s+)?"
    r"(?:use|touch|change|edit|modify|commit|push|merge|delete|remove|add|call|run|write"
    r"|create|rename|break|install|import|send|share|include|expose|store|log|return|rely"
    r"|depend|exceed|allow|want|need|accept|deploy|release)\b"
    r"|\b(?:you|we|it|this|that|they|these|those|code|tests?|output)\s+must\s+"
    r"(?!have\b|feel\b|be\s+(?:so|really|very|such|a|an|\w+ing)\b)",
    re.IGNORECASE,
)
# A JSON or Python-dict key: the quoted name and its colon.
_KEY_AFTER = re.compile(r"""["']\s*:""")
_KEY_BEFORE = re.compile(r"""["']([A-Za-z_][\w.-]{0,60})["']\s*:\s*["']?$""")
_VALUE_END = re.compile(r"""["']?\s*(?:[,}\]]|$)""", re.MULTILINE)
_NUMBER_NOUN = re.compile(
    r"\b(build|port|pid|version|issue|pr|ticket|order|reservation|booking|flight|room|job"
    r"|run|release|account|invoice|case|step|attempt|id|number|no\.|code|status)\s*[:#]?\s*$",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
_TRAILING = ".,;:!?)]}'\""
_SEGMENT_CHARS = 1024


@dataclass(frozen=True)
class Artifact:
    """One must-keep item: its kind, its text, where it starts, and its JSON key if it has one."""

    kind: str
    text: str
    start: int
    key: str | None = None

    @property
    def shown(self) -> str:
        """The item as a reader needs it: with its key (``user_id: mia_li_3668``) when it has one."""
        return f"{self.key}: {self.text}" if self.key else self.text


_OFFER_EVERY_S = 0.001
_offered = [0.0]


def _offer_gil() -> None:
    """Let other threads run if a millisecond of scanning has passed since the last offer.

    A ``sleep(0)`` is a system call that, on a busy machine, can give the CPU
    away for a whole time slice; offered per segment it made the first
    compaction of a long log several times slower. Once a millisecond still
    keeps a turn from waiting out the 5 ms switch interval. Only a scan in the
    background offers: on the main thread (an inline compaction) the scan is
    the turn, and the threads beside it (a lease keeper) sleep.
    """
    if threading.current_thread() is threading.main_thread():
        return
    now = time.perf_counter()
    if now - _offered[0] >= _OFFER_EVERY_S:
        _offered[0] = now
        time.sleep(0)


def find_artifacts(text: str, kinds: Iterable[str] = KINDS) -> list[Artifact]:
    """Every must-keep item in ``text`` in order of appearance, each text once.

    The text is scanned in segments cut at line breaks (no item spans one), and
    the GIL is offered to other threads between segments: a compaction scanning
    a long history in the background never makes the thread serving the next
    turn wait out a whole switch interval.
    """
    wanted = set(kinds)
    found: list[Artifact] = []
    for offset, segment in _segments(text):
        _offer_gil()
        found.extend(_token_artifacts(segment, offset, wanted))
        if "error" in wanted:
            found.extend(_error_lines(segment, offset))
        if "constraint" in wanted:
            found.extend(
                Artifact("constraint", sentence, offset + begin)
                for begin, sentence in sentences(segment)
                if is_constraint(sentence)
            )
    found.sort(key=lambda a: (a.start, KINDS.index(a.kind)))
    seen: set[str] = set()
    unique: list[Artifact] = []
    for artifact in found:
        if artifact.text not in seen:
            seen.add(artifact.text)
            unique.append(artifact)
    return unique


def _segments(text: str) -> Iterator[tuple[int, str]]:
    """``text`` in pieces of about ``_SEGMENT_CHARS``, each ending at a line break."""
    begin = 0
    while begin < len(text):
        end = text.find("\n", begin + _SEGMENT_CHARS)
        end = len(text) if end < 0 else end + 1
        yield begin, text[begin:end]
        begin = end


def _token_artifacts(segment: str, offset: int, wanted: set[str]) -> list[Artifact]:
    """Pattern matches in one segment; a span taken by an earlier pattern is not reused."""
    found: list[Artifact] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _TOKEN_PATTERNS:
        for match in pattern.finditer(segment):
            item = match.group().rstrip(_TRAILING)
            begin, end = match.start(), match.start() + len(item)
            if not item or any(begin < e and s < end for s, e in taken):
                continue
            taken.append((begin, end))
            if kind in wanted and not _is_key(segment, begin, end):
                key = _KEY_BEFORE.search(segment, max(begin - 80, 0), begin)
                found.append(Artifact(kind, item, offset + begin, key[1] if key else None))
    return found


def _is_key(segment: str, begin: int, end: int) -> bool:
    """Whether ``segment[begin:end]`` is the quoted key of a JSON or dict entry."""
    return begin > 0 and segment[begin - 1] in "\"'" and bool(_KEY_AFTER.match(segment, end))


def extract_artifacts(text: str, kinds: Iterable[str] = KINDS) -> list[str]:
    """The texts of ``find_artifacts``: what a summary of ``text`` must keep."""
    return [a.text for a in find_artifacts(text, kinds)]


def find_facts(text: str) -> list[Artifact]:
    """The items a summary of ``text`` must keep: every artifact but a bare number.

    A number is a fact only as the whole value of a key (``price: 281``, not
    the 281 of ``"address1": "281 Main St"``) or after a noun naming it
    (``build 4711``); each fact is listed once, by what it shows.
    """
    seen: set[str] = set()
    facts: list[Artifact] = []
    for found in find_artifacts(text):
        fact = _named_number(text, found) if found.kind == "number" else found
        if fact is not None and fact.shown not in seen:
            seen.add(fact.shown)
            facts.append(fact)
    return facts


def _named_number(text: str, number: Artifact) -> Artifact | None:
    """A number with what names it: a key's whole value, or a noun before it ("build 4711")."""
    if number.key is not None:
        whole = _VALUE_END.match(text, number.start + len(number.text)) is not None
        return number if whole else None
    noun = _NUMBER_NOUN.search(text, max(number.start - 40, 0), number.start)
    return replace(number, key=noun[1]) if noun else None


def missing_artifacts(items: Sequence[str], text: str) -> list[str]:
    """The items that ``text`` does not contain.

    Case and spacing are ignored and an item must stand on word boundaries,
    so "12" is not found in "2012" but "5 km" is found in "5km".
    """
    squashed = _squash(text)
    return [
        item
        for item in items
        if _squash(item) not in squashed or not _pattern_for(item).search(text)
    ]


def is_constraint(sentence: str) -> bool:
    """A directive (an order, a prohibition, a rule), not a question.

    The markers alone ("I always loved painting", "you must be proud") are
    common in plain chat; a constraint puts them in an imperative or in front
    of an action verb.
    """
    return not sentence.rstrip().endswith("?") and bool(_CONSTRAINT.search(sentence))


def is_error_line(line: str) -> bool:
    # Each alternative of the pattern holds one of these words: a line with none
    # of them cannot match, and the pattern's backtracking is skipped.
    return any(hint in line for hint in _ERROR_HINTS) and bool(_ERROR_LINE.search(line))


def sentences(text: str) -> list[tuple[int, str]]:
    """``text`` cut into lines and sentences, with their start offsets."""
    out: list[tuple[int, str]] = []
    begin = 0
    for match in _SENTENCE_END.finditer(text):
        _add_stripped(out, text, begin, match.start())
        begin = match.end()
    _add_stripped(out, text, begin, len(text))
    return out


def _add_stripped(out: list[tuple[int, str]], text: str, begin: int, end: int) -> None:
    piece = text[begin:end]
    stripped = piece.strip()
    if stripped:
        out.append((begin + piece.index(stripped[0]), stripped))


def _error_lines(text: str, offset: int = 0) -> list[Artifact]:
    out: list[Artifact] = []
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped and is_error_line(stripped):
            shown = stripped[:_ERROR_LINE_CHARS]
            out.append(Artifact("error", shown, offset + line.index(stripped[0])))
        offset += len(line)
    return out


def _squash(text: str) -> str:
    """Lowercase without white space: an item absent from this is absent, whatever its spacing."""
    return "".join(text.lower().split())


@functools.lru_cache(maxsize=4096)
def _pattern_for(item: str) -> re.Pattern[str]:
    pieces = [p for word in item.split() for p in re.findall(r"\d+(?:[.,]\d+)*|\D+", word)]
    body = r"\s*".join(re.escape(p) for p in pieces)
    lead = r"(?<!\w)" if item[:1].isalnum() else ""
    tail = r"(?!\w)" if item[-1:].isalnum() else ""
    return re.compile(lead + body + tail, re.IGNORECASE)
