"""Which language a conversation is in, from its stop words: no model, no download.

A summary written in another language than the conversation makes the model
that reads it translate (and misquote) the user's own words, so strategies that
write prose tell the summarizer the conversation's language. Seven languages
are told apart by how many of the text's words are among each one's most
common function words; a text with too few of them (code, a log) is ``en``.
"""

from __future__ import annotations

import re
from collections import Counter

LANGUAGES: dict[str, str] = {
    "en": "English",
    "fr": "French",
    "de": "German",
    "es": "Spanish",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
}
"""The languages told apart, by code, with the name a prompt gives each."""
DEFAULT = "en"
MIN_HITS = 3
"""Stop words a text needs before its language is told (fewer: ``DEFAULT``)."""
SAMPLE_CHARS = 20_000
"""How much of a long text is read: its end, where the conversation is now."""


def _stop_words(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Words frequent in each language; a word in two lists (``de``, ``e``, ``is``) counts for
# both, and the rest of the text decides.
_STOP_WORDS: dict[str, frozenset[str]] = {
    "en": _stop_words(
        "the and of to is that it for with was this are be have not you on what but "
        "they which from would there can will should could been we my your"
    ),
    "fr": _stop_words(
        "le la les et est une des du que qui dans pour pas sur au avec ce cette il elle "
        "nous vous sont mais ou fichier je tu ne plus aux leur"
    ),
    "de": _stop_words(
        "der die das und ist nicht ein eine zu mit den dem sich auf für auch ich sie es "
        "wir ihr aber oder wird sind noch wenn dass bitte datei"
    ),
    "es": _stop_words(
        "el los las y es una por para con no lo del se al como más pero su sus está "
        "este esta yo usted archivo también hay muy"
    ),
    "it": _stop_words(
        "il lo gli e è della delle che per non una con sono anche come più ma questo "
        "questa io nel alla ho hai file perché"
    ),
    "pt": _stop_words(
        "o os as e é uma do da dos das que não com para por em um mais mas como está "
        "você eu isso arquivo também ao"
    ),
    "nl": _stop_words(
        "de het een en is van dat niet op te met voor zijn ook maar als bij er wat "
        "ik je wij jij naar bestand nog"
    ),
}
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def detect_language(text: str) -> str:
    """The code of the language ``text`` is most likely in (``LANGUAGES``), else ``DEFAULT``.

    Each language scores the words of ``text`` among its stop words; the best
    score wins when it has ``MIN_HITS`` at least, and ties go to English.
    """
    words = Counter(w.lower() for w in _WORD.findall(text[-SAMPLE_CHARS:]))
    scores = {
        code: sum(count for word, count in words.items() if word in stop)
        for code, stop in _STOP_WORDS.items()
    }
    best = max(scores, key=lambda code: (scores[code], code == DEFAULT))
    return best if scores[best] >= MIN_HITS else DEFAULT


def language_name(code: str) -> str:
    """The English name of a language code, for a prompt (the code itself when unknown)."""
    return LANGUAGES.get(code, code)
