"""The one judge of model answers: no answer becomes a fold before ``judge`` accepts it.

Every model strategy asks through ``summarize_checked``, which puts each answer
here. The rules, in order (the first that fails names the reason):

1. **Refused**: the provider said so (OpenAI's ``refusal`` field, Anthropic's
   ``stop_reason: "refusal"``, both carried as ``Completion.refusal``).
2. **Nothing**: empty, or a null word alone (``null``, ``None``, ``undefined``,
   ``{}``, ...).
3. **An error document**: an HTML page (the answer opens with tags), or a JSON
   error body (``{"error": {...}}``, ``{"detail": ...}``, ``{"object": "error"}``).
4. **Error or refusal wording**, in several phrasings and with straight or
   curly apostrophes ("Sorry, I can't help with that", "I\u2019m unable to", "As an
   AI", "502 Bad Gateway", "Service Unavailable", "rate limit exceeded", ...).
   A summary of a debugging session names its 502s and tracebacks, so wording
   alone is not enough. The answer is rejected when
   - it is nothing but such wording (fewer than ``MIN_CONTENT_WORDS`` other
     words), whatever the folded material holds; or
   - the wording is foreign (the material the model was asked to fold, between
     its ``<history>`` tags, does not hold it) and the answer is short
     (``SHORT_WORDS`` words or fewer) or the wording is in its opening or
     closing sentence.
5. **Degenerate**: a loop, not a summary (one sentence repeated, most of its
   phrases repeated, next to nothing new: ``strategies.degenerate``), in the
   answer or in one of its JSON strings. Checked before any trimming, so a
   loop cut at a sentence end cannot pass.
6. **The wrong shape**: not a JSON object with the schema's required keys where
   JSON was asked for, then the strategy's own check (``accept``: goal batch's
   sections, rolling's prose, the concept answers, ...). JSON is read
   leniently first (``strategies.lenient``: fenced, inside prose, cut off, and
   with ``Expected.least`` partial or prose).
7. **Too long**: more tokens than its cap, or than the range it replaces. The
   answer is first trimmed at sentence ends (prose whole, a JSON answer string
   by string); the trimmed answer is taken when it passes every rule.

A JSON answer is read as prose by its string values, so a
``{"summary": "Sorry, I can't"}`` is a refusal too.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextfold.core.messages import Message, text_of
from contextfold.llm.base import HISTORY_CLOSE, HISTORY_OPEN, Completion, parse_json
from contextfold.strategies.degenerate import degenerate
from contextfold.strategies.lenient import Least, read_answer, required_of

SHORT_WORDS = 60
"""An answer this short that holds foreign error or refusal wording is that error or refusal."""
MIN_CONTENT_WORDS = 4
"""Words besides error or refusal wording an answer needs to be more than that wording."""
EDGE_CHARS = 200
"""How much of an answer's opening and closing sentence is read for wording."""

_APOSTROPHES = re.compile("[\u2019\u2018\u02bc\u2032`\u00b4]")
_NULLS = frozenset(
    {"null", "none", "nil", "undefined", "nan", "n/a", "na", "{}", "[]", '""', "''", "empty"}
    | {"(empty)", "<empty>", "no summary", "no response", "no answer", "no content"}
)
# What a refusal declines: the request itself, not a task step ("I can't reproduce it").
_REQUEST_VERBS = (
    r"(?:help|assist|comply|fulfil|fulfill|provide|summari[sz]e|answer|respond|continue"
    r"|engage|do (?:that|this|it))"
)
_CANT = (
    r"(?:can't|cannot|can not|won't|will not|am unable to|'m unable to|am not able to"
    r"|'m not able to|am not allowed to|'m not allowed to|must decline to|have to decline to"
    r"|do not feel comfortable|don't feel comfortable|am not comfortable|'m not comfortable)"
)
REFUSAL_PATTERNS: tuple[str, ...] = (
    r"\b(?:i|we)(?:'m| am| are|'re)? sorry\b(?:,? but)?",
    r"^\W*sorry\b",
    r"\bi apologi[sz]e\b(?:,? but)?",
    r"\bmy apologies\b",
    r"\bi(?:'d| would) (?:rather|prefer) not\b",
    rf"\b(?:i|we) ?{_CANT}(?: \w+){{0,3}}? {_REQUEST_VERBS}\b",
    r"\b(?:i|we) (?:can't|cannot|can not|won't|will not)(?: do (?:that|this|it))?\s*(?:[.!]|$)",
    r"\b(?:i|we) (?:must|have to|need to) (?:respectfully )?decline\b",
    r"\bunable to (?:help|assist|comply|fulfil|fulfill) with (?:this|that|your) (?:request|task)\b",
    r"\bas an ai\b(?: language model| assistant| model)?",
    r"\bas a (?:large )?language model\b",
    r"\bi(?:'m| am) (?:just |only )?an ai\b",
    r"\b(?:against|violates?|violating) (?:my|our|the|openai's) (?:\w+ )?"
    r"(?:guidelines|polic(?:y|ies)|terms)\b",
    r"\bcontent (?:policy|filter|management policy)\b",
)
ERROR_PATTERNS: tuple[str, ...] = (
    r"\b(?:http/\d(?:\.\d)? )?(?:error )?[45]\d\d\b(?: error)?:? ?(?:bad request|unauthorized"
    r"|forbidden|not found|method not allowed|request time-?out|conflict|payload too large"
    r"|too many requests|internal server error|bad gateway|service (?:temporarily )?unavailable"
    r"|gateway time-?out)\b",
    r"\binternal server error\b",
    r"\bbad gateway\b",
    r"\bservice (?:is )?(?:temporarily |currently )?unavailable\b",
    r"\bgateway time-?out\b",
    r"\btoo many requests\b",
    r"\brate[ _-]?limit(?:ed|s)?(?: (?:exceeded|reached|error))?\b",
    r"\b(?:request|connection|read|upstream request) timed? ?out\b",
    r"\bupstream (?:connect )?error\b",
    r"\bno healthy upstream\b",
    r"\bconnection (?:refused|reset|error|failure|aborted)\b",
    r"\b(?:the )?(?:server|model|engine|service) (?:is )?(?:currently )?overloaded\b",
    r"\boverloaded_error\b",
    r"\ban? (?:unexpected |internal |unknown )?error (?:has )?occurred\b",
    r"\bsomething went wrong\b",
    r"\bsorry about that\b",
    r"\b(?:had|encountered) an error (?:while|when) (?:processing|handling)\b",
    r"\bplease try again\b(?: later)?|\btry again later\b",
    r"\bmaximum context length\b",
    r"\bcontext[ _]length[ _]exceeded\b",
    r"\b(?:invalid|incorrect) api key\b",
    r"\binsufficient_quota\b|\bquota exceeded\b|\bexceeded your current quota\b",
    r"\bthe model [`'\"]?[\w./:-]+[`'\"]? does not exist\b",
    r"\bmodel not found\b",
    r"\btraceback \(most recent call last\)|\bunhandled exception\b",
    r"\b(?:cuda )?out of memory\b|\boom\b",
    r"^\W*(?:error|exception|fatal)\b\s*(?:[:\-—]|\d{3}\b|$)",
    r"\berror code:? ?\d{3}\b",
    r"\bnginx(?:/[\d.]+)?\b|\bcloudflare\b|\bray id\b|\bvarnish\b|\bopenresty\b",
    r"\bthe server (?:encountered an (?:internal )?error|is (?:temporarily )?unable)\b",
    r"\binvalid response from (?:the |an )?upstream server\b",
    r"\bunable to (?:service|handle|process) (?:your|the|this) request\b",
    r"\b(?:failed|unable) to (?:generate|get|fetch|produce|load) (?:a |the )?"
    r"(?:response|completion|answer|model)\b",
    r"\bthe requested url\b",
)
_WORDING = re.compile(
    "|".join(f"(?:{p})" for p in (*REFUSAL_PATTERNS, *ERROR_PATTERNS)), re.MULTILINE
)
_TAGS = re.compile(r"<\s*/?\s*[a-z!][^<>]{0,200}>")
_HTML_TAGS = re.compile(
    r"<\s*/?\s*(?:!doctype|html|head|body|title|h[1-6]|center|hr|p|div|meta|pre|span|br)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z][a-z']*|\d+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+")
_ERROR_KEYS = frozenset(
    {"error", "errors", "detail", "message", "code", "status", "type", "object", "title"}
    | {"param", "request_id", "status_code", "statuscode", "error_code", "msg", "success"}
)


@dataclass(frozen=True)
class Expected:
    """What a strategy expects of an answer.

    ``material`` is what the model was asked to fold (wording found there is
    quoted, not the answer's own); ``max_tokens`` the answer's cap and
    ``tokens_before`` the range it replaces (None: unknown); ``schema`` the
    JSON asked for; ``accept`` the strategy's own check, returning a reason;
    ``least`` what the strategy can use of a partial or prose answer, and
    ``prose`` whether the request was its smaller one, asking for prose.
    """

    material: str
    max_tokens: int
    count: Callable[[str], int]
    tokens_before: int | None = None
    schema: Mapping[str, Any] | None = None
    accept: Callable[[Completion], str | None] | None = None
    least: Least | None = None
    prose: bool = False

    @functools.cached_property
    def material_words(self) -> str:
        """The material's words, computed once for every answer of a job."""
        return _words(normalized(self.material))

    @property
    def limit(self) -> int:
        """The most tokens an answer may have: its cap, and never more than it replaces."""
        if self.tokens_before is None:
            return self.max_tokens
        return max(min(self.max_tokens, self.tokens_before), 1)


@dataclass(frozen=True)
class Verdict:
    """The accepted answer (perhaps trimmed), or why there is none."""

    answer: Completion | None
    reason: str | None


def judge(completion: Completion, expected: Expected) -> Verdict:
    """Accept ``completion``, a trimmed copy of it, or say why it is unusable."""
    if expected.schema is not None:
        completion = read_answer(completion, expected.schema, expected.least, prose=expected.prose)
    reason = _content_problem(completion, expected)
    if reason is not None:
        return Verdict(None, reason)
    tokens = expected.count(completion.text)
    if tokens <= expected.limit:
        return Verdict(completion, None)
    too_long = f"answer of {tokens} tokens is longer than the {expected.limit} allowed" + (
        " (the range it replaces)"
        if expected.tokens_before is not None and expected.tokens_before < expected.max_tokens
        else ""
    )
    trimmed = _trimmed(completion, expected, tokens)
    if trimmed is None or _content_problem(trimmed, expected) is not None:
        return Verdict(None, too_long)
    return Verdict(trimmed, None)


def _trimmed(completion: Completion, expected: Expected, tokens: int) -> Completion | None:
    """The answer cut at sentence ends to fit ``expected.limit``: prose whole, JSON field by field.

    Each JSON string gets its share of the limit (what it has, scaled down);
    None when no cut fits.
    """
    if expected.schema is None:
        shorter = trim(completion.text, expected.limit, expected.count)
        return None if shorter is None else replace(completion, text=shorter)
    share = expected.limit / tokens * 0.9

    def cut(value: Any) -> Any:
        if isinstance(value, str):
            size = expected.count(value)
            return value if size < 20 else trim(value, int(size * share), expected.count) or value
        if isinstance(value, Mapping):
            return {key: cut(item) for key, item in value.items()}
        if isinstance(value, list):
            return [cut(item) for item in value]
        return value

    data = cut(completion.data)
    text = json.dumps(data, ensure_ascii=False)
    if expected.count(text) > expected.limit:
        return None
    return replace(completion, text=text, data=data)


def _content_problem(completion: Completion, expected: Expected) -> str | None:
    """Rules 1 to 6: everything but the length."""
    if completion.refusal:
        return f"the model refused: {_shown(completion.refusal)}"
    text = completion.text.strip()
    if not text:
        return "empty answer"
    if is_null(text):
        return f"answer is a null value: {_shown(text)}"
    if is_html(text):
        return f"answer is an HTML page: {_shown(text)}"
    data = completion.data if completion.data is not None else parse_json(text)
    asked = set((expected.schema or {}).get("properties") or ())
    # A schema may itself ask for an ``errors`` or ``status`` field (a concept's id, say).
    if is_error_body(data) and not set(data) <= asked:
        return f"answer is a JSON error body: {_shown(text)}"
    prose = text
    pieces = [text]
    if expected.schema is not None and isinstance(data, Mapping | list):
        values = list(strings(data))
        if any(is_html(v) or is_error_body(parse_json(v)) for v in values):
            return f"answer holds an error page or body: {_shown(text)}"
        if values and all(is_null(v) or not v.strip() for v in values):
            return f"answer holds only empty or null values: {_shown(text)}"
        prose = "\n".join(values)
        pieces = values
    wording = error_wording(prose, lambda: expected.material_words)
    if wording is not None:
        return wording
    # Each field on its own: groups of like work may be summarized alike.
    for piece in pieces:
        loop = degenerate(piece, lambda: expected.material)
        if loop is not None:
            return loop
    if expected.schema is not None:
        missing = schema_problem(completion.data, required_of(expected.schema, expected.least))
        if missing is not None:
            return missing
    if expected.accept is not None:
        return expected.accept(completion)
    return None


def is_null(text: str) -> bool:
    """A null word alone, perhaps quoted, fenced or followed by a full stop."""
    bare = text.strip().strip("`").strip().removeprefix("json").strip().rstrip(".").strip()
    return bare.lower() in _NULLS or bare.strip("\"'").lower() in _NULLS


def is_html(text: str) -> bool:
    """An HTML document or error page: it opens with an HTML tag and holds several."""
    opening = text.lstrip()
    return _HTML_TAGS.match(opening) is not None and len(_HTML_TAGS.findall(opening[:4000])) >= 2


def is_error_body(data: Any) -> bool:
    """A JSON error body: only error keys, among them ``error``, ``errors`` or ``detail``."""
    if not isinstance(data, Mapping) or not data:
        return False
    keys = {str(k).lower() for k in data}
    if not keys <= _ERROR_KEYS:
        return False
    return bool(keys & {"error", "errors", "detail"}) or data.get("object") == "error"


def error_wording(prose: str, material_words: Callable[[], str]) -> str | None:
    """Why ``prose`` is an error or refusal rather than a summary mentioning one (rule 4).

    ``material_words`` gives the words of the folded material (``_words``),
    asked for only when the answer holds such wording.
    """
    text = normalized(prose).strip()
    spans = [(m.start(), m.end()) for m in _WORDING.finditer(text)]
    if not spans:
        return None
    if _content_words(text, spans) < MIN_CONTENT_WORDS:
        return f"answer is error or refusal wording: {_shown(prose)}"
    source = material_words()
    foreign = [(s, e) for s, e in spans if _words(text[s:e]) not in source]
    if not foreign:
        return None
    short = len(_WORD.findall(text)) <= SHORT_WORDS
    ends = [m.end() for m in _SENTENCE_END.finditer(text) if m.end() < len(text)]
    opening = min(ends[0] if ends else len(text), EDGE_CHARS)
    closing = max(ends[-1] if ends else 0, len(text) - EDGE_CHARS)
    for start, end in foreign:
        where = (
            "a short answer"
            if short
            else "its opening sentence"
            if start < opening
            else "its closing sentence"
            if end > closing
            else None
        )
        if where is not None:
            return f"error or refusal wording in {where}: {_shown(text[start:end])}"
    return None


def normalized(text: str) -> str:
    """Lower case, one kind of apostrophe, white space runs as one space within a line."""
    lines = (" ".join(line.split()) for line in _APOSTROPHES.sub("'", text).lower().split("\n"))
    return "\n".join(lines)


def _words(text: str) -> str:
    """The words of ``text`` between spaces, numbers left out, for a whole-word search."""
    return " " + " ".join(w for w in re.findall(r"[a-z0-9]+", text) if not w.isdigit()) + " "


def _content_words(text: str, spans: Sequence[tuple[int, int]]) -> int:
    """Words outside the wording's spans, tags and status codes."""
    kept: list[str] = []
    last = 0
    for start, end in spans:
        kept.append(text[last:start])
        last = max(last, end)
    kept.append(text[last:])
    rest = _TAGS.sub(" ", " ".join(kept))
    return sum(1 for w in _WORD.findall(rest) if not w.isdigit() and len(w) > 1)


def strings(data: Any) -> Iterator[str]:
    """Every string in a JSON value, depth first."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, Mapping):
        for value in data.values():
            yield from strings(value)
    elif isinstance(data, list):
        for value in data:
            yield from strings(value)


def schema_problem(data: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``data`` is not the object ``schema`` asks for: not an object, or a required key missing."""
    if not isinstance(data, Mapping):
        return "answer is not the JSON object that was asked for"
    missing = [key for key in schema.get("required") or () if data.get(key) is None]
    if missing:
        return f"answer lacks the required key(s) {', '.join(missing)}"
    return None


def trim(text: str, limit: int, count: Callable[[str], int]) -> str | None:
    """``text`` cut at the last sentence end that keeps it within ``limit`` tokens, or None."""
    cuts = [m.start() for m in _SENTENCE_END.finditer(text)]
    best: str | None = None
    low, high = 0, len(cuts) - 1
    while low <= high:
        middle = (low + high) // 2
        candidate = text[: cuts[middle]].rstrip()
        if count(candidate) <= limit:
            best = candidate
            low = middle + 1
        else:
            high = middle - 1
    return best or None


def prose_problem(completion: Completion) -> str | None:
    """The check of a strategy that asks for prose: a JSON object or list is not a summary."""
    if isinstance(parse_json(completion.text), Mapping | list):
        return "answer is JSON where a prose summary was asked for"
    return None


def material_of(messages: Sequence[Message]) -> str:
    """What a prompt asks to fold: the text between its ``<history>`` tags (all of it if none)."""
    text = "\n".join(text_of(m) for m in messages)
    parts = re.findall(
        re.escape(HISTORY_OPEN) + r"\n?(.*?)\n?" + re.escape(HISTORY_CLOSE), text, re.DOTALL
    )
    return "\n".join(parts) if parts else text


def _shown(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= 80 else flat[:79] + "…")
