"""Filler: the words of a kept sentence that carry no fact, dropped to fit more facts.

A fold quotes sentences; most conversational ones spend tokens on
interjections, hedges and intensifiers ("Oh wow, that's really so cool!").
``terse`` drops those words and keeps every other word in its order, so a
quote stays the speaker's words, only fewer of them. Negations, pronouns and
content words are never filler. Measured on the tuning half of the dev data
(LoCoMo, 10% budget, questions other than temporal), with the session headers
without their time of day: answer retention 0.354 whole, 0.371 terse.
"""

from __future__ import annotations

import re

_FILLER_TEXT = """oh ohh ooh wow whoa hey hi hello yeah yes yep yup ok okay um uh hmm haha hahaha
    lol omg aww awww really so just very totally actually kinda sorta literally definitely
    absolutely quite basically honestly seriously truly"""
FILLER = frozenset(_FILLER_TEXT.split())
_FILLER = re.compile(
    r"(?<![\w'-])(?:" + "|".join(sorted(FILLER, key=len, reverse=True)) + r")(?![\w'-])[,!.]*\s*",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w")


def terse(text: str) -> str:
    """``text`` without its filler words (``text`` itself when only filler is left)."""
    out = _FILLER.sub("", text).strip()
    if not _WORD.search(out):
        return text
    return out[0].upper() + out[1:] if text[:1].isupper() else out
