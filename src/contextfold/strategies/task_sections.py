"""The task state's sections: read from any answer, merged in code, written under fixed anchors.

A task state has six sections, each under a heading that never changes
(``ANCHORS``), so the agent reading it and the next merge find them: intent and
constraints, artifacts, decisions and why, errors and fixes, open items, the
next step. Besides them it keeps a progress note (an answer in plain prose)
and the user's latest messages verbatim.

A model answers with *updates*, not a new state (``StateUpdate``): items to
add, items now done or obsolete, a new next step. ``merged`` applies them:
added items are appended once; intent, decision and open items marked done
are removed; artifacts are kept one per path or identifier, the newest
wording winning; errors are history and are never removed; the next step and
the progress note are replaced. A detail an earlier fold kept therefore
survives any later answer that leaves it out.

``parse_answer`` reads what small models write: a JSON object (perhaps with
only some sections, in a code fence or inside prose), Markdown or plain lines
under headings or ``Label:`` prefixes in English or the conversation's
language, or plain prose (the progress note).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contextfold.extract.artifacts import find_artifacts
from contextfold.llm.base import parse_json
from contextfold.strategies.answers import is_error_body, is_html, is_null

LISTS = ("intent", "artifacts", "decisions", "errors", "open_items")
"""The sections that are lists of items; ``next_step`` is one text."""
ANCHORS: dict[str, str] = {
    "intent": "## Intent and constraints",
    "artifacts": "## Artifacts",
    "decisions": "## Decisions and why",
    "errors": "## Errors and fixes",
    "open_items": "## Open items",
    "next_step": "## Next step",
}
HEADER = "[TASK STATE]"
PROGRESS = "Progress:"
USER_WORDS = "The user's words (verbatim, latest last):"
NONE = "(none)"
DONE_REMOVES = ("intent", "decisions", "open_items")
"""The sections whose items an answer's ``done`` removes; artifacts and errors are history."""
_ARTIFACT_KINDS = ("url", "path", "ticket", "hex", "code", "identifier")

# Heading words by section, in the order a heading is matched (``next step`` before
# ``open``, ``done`` before the rest): English, then each language's.
_HEADINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "next_step": {
        "en": ("next step", "next action", "next"),
        "fr": ("prochaine étape", "étape suivante", "prochaine action", "suite"),
        "de": ("nächster schritt", "nächste schritt", "als nächstes"),
        "es": ("siguiente paso", "próximo paso"),
        "it": ("prossimo passo", "passo successivo"),
        "pt": ("próximo passo", "próxima etapa"),
        "nl": ("volgende stap",),
    },
    "done": {
        "en": ("done", "completed", "obsolete", "resolved"),
        "fr": ("terminé", "fait", "obsolète", "résolu"),
        "de": ("erledigt", "abgeschlossen", "veraltet"),
        "es": ("hecho", "completado", "obsoleto", "resuelto"),
        "it": ("fatto", "completato", "obsoleto", "risolto"),
        "pt": ("feito", "concluído", "obsoleto", "resolvido"),
        "nl": ("klaar", "afgerond", "verouderd", "opgelost"),
    },
    "open_items": {
        "en": ("open item", "open question", "open", "todo", "to do", "remaining", "pending"),
        "fr": ("points ouverts", "point ouvert", "à faire", "en suspens", "en cours"),
        "de": ("offene punkte", "offen", "ausstehend", "zu erledigen"),
        "es": ("pendiente", "abierto", "por hacer"),
        "it": ("punti aperti", "da fare", "in sospeso", "aperti"),
        "pt": ("pendente", "em aberto", "a fazer"),
        "nl": ("open punten", "openstaand", "te doen"),
    },
    "errors": {
        "en": ("error", "fix", "bug", "failure", "problem", "issue"),
        "fr": ("erreur", "correction", "problème", "bogue"),
        "de": ("fehler", "korrektur", "problem"),
        "es": ("error", "corrección", "problema", "fallo"),
        "it": ("errore", "errori", "correzion", "problem"),
        "pt": ("erro", "correç", "problema", "falha"),
        "nl": ("fout", "oplossing", "probleem"),
    },
    "decisions": {
        "en": ("decision", "decided", "rationale", "choice"),
        "fr": ("décision", "choix"),
        "de": ("entscheidung", "beschluss"),
        "es": ("decision", "decisión", "elección"),
        "it": ("decision", "scelt"),
        "pt": ("decisão", "decisões", "escolha"),
        "nl": ("beslissing", "besluit", "keuze"),
    },
    "artifacts": {
        "en": ("artifact", "artefact", "file", "path", "url", "identifier", "command"),
        "fr": ("artefact", "fichier", "chemin", "commande", "identifiant"),
        "de": ("artefakt", "datei", "pfad", "befehl", "kennung"),
        "es": ("artefacto", "archivo", "ruta", "comando", "identificador"),
        "it": ("artefatt", "file", "percors", "comand", "identificator"),
        "pt": ("artefato", "arquivo", "ficheiro", "caminho", "comando", "identificador"),
        "nl": ("artefact", "bestand", "pad", "commando", "opdracht"),
    },
    "intent": {
        "en": ("intent", "goal", "task", "request", "constraint", "requirement", "objective"),
        "fr": ("intention", "objectif", "tâche", "demande", "contrainte", "exigence", "but"),
        "de": ("absicht", "ziel", "aufgabe", "anforderung", "vorgabe", "einschränkung"),
        "es": ("intención", "objetivo", "tarea", "restricción", "requisito", "petición"),
        "it": ("intento", "obiettivo", "compito", "vincol", "requisit", "richiesta"),
        "pt": ("intenção", "objetivo", "tarefa", "restriç", "requisito", "pedido"),
        "nl": ("doel", "taak", "verzoek", "eis", "beperking", "opdracht"),
    },
    "progress": {
        "en": ("progress", "status", "summary"),
        "fr": ("progrès", "avancement", "état", "résumé"),
        "de": ("fortschritt", "stand", "zusammenfassung"),
        "es": ("progreso", "estado", "resumen"),
        "it": ("progress", "stato", "riepilogo"),
        "pt": ("progresso", "estado", "resumo"),
        "nl": ("voortgang", "status", "samenvatting"),
    },
}
_MARKDOWN_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*(?P<label>.+?)\s*#*\s*$")
_BOLD_HEADING = re.compile(r"^\s*\*\*(?P<label>[^*\n]{1,60})\*\*\s*:?\s*(?P<rest>.*)$")
_LABEL = re.compile(r"^\s*(?P<label>[^\W\d_](?:[^\W\d_]|[ '\u2019-]){0,40}?)\s*:\s*(?P<rest>.*)$")
_BULLET = re.compile(r"^\s*(?:[-*•+]|\d{1,3}[.)])\s+")
_LABEL_WORDS = 5
_FENCE = re.compile(r"^`{3,}\w*$")
_DESCRIBED = re.compile(r"\s*(?::\s|\s\(|\s[-\u2013\u2014]\s)")


@dataclass(frozen=True)
class TaskState:
    """One state: the list sections, the next step, the progress note, the user's words."""

    intent: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    open_items: tuple[str, ...] = ()
    next_step: str = ""
    progress: str = ""
    user_words: tuple[str, ...] = ()

    def to_data(self) -> dict[str, Any]:
        """The state as JSON data, kept in the fold's data for the next merge."""
        return {
            **{name: list(getattr(self, name)) for name in (*LISTS, "user_words")},
            "next_step": self.next_step,
            "progress": self.progress,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> TaskState:
        """A state from ``to_data``'s data; what is missing or malformed is empty."""

        def items(name: str) -> tuple[str, ...]:
            value = data.get(name)
            return tuple(str(v) for v in value) if isinstance(value, list) else ()

        def text(name: str) -> str:
            value = data.get(name)
            return value if isinstance(value, str) else ""

        return cls(
            intent=items("intent"),
            artifacts=items("artifacts"),
            decisions=items("decisions"),
            errors=items("errors"),
            open_items=items("open_items"),
            next_step=text("next_step"),
            progress=text("progress"),
            user_words=items("user_words"),
        )


@dataclass(frozen=True)
class StateUpdate:
    """What one answer changes: items added by section, items done, a new next step or note."""

    added: Mapping[str, Sequence[str]] = field(default_factory=dict)
    done: Sequence[str] = ()
    next_step: str = ""
    progress: str = ""

    @property
    def empty(self) -> bool:
        return not (any(self.added.values()) or self.done or self.next_step or self.progress)


def merged(state: TaskState, update: StateUpdate) -> TaskState:
    """``update`` applied to ``state`` (the rules are the module's)."""
    done = [_norm(d) for d in update.done if _norm(d)]
    changed: dict[str, tuple[str, ...]] = {}
    for name in LISTS:
        kept = list(getattr(state, name))
        if name in DONE_REMOVES:
            kept = [item for item in kept if not _is_done(_norm(item), done)]
        key = artifact_key if name == "artifacts" else _norm
        changed[name] = tuple(_joined(kept, update.added.get(name, ()), key))
    return replace(
        _with_lists(state, changed),
        next_step=update.next_step or state.next_step,
        progress=update.progress or state.progress,
    )


def _with_lists(state: TaskState, lists: Mapping[str, Sequence[str]]) -> TaskState:
    """``state`` with its list sections taken from ``lists``."""
    return replace(
        state,
        intent=tuple(lists["intent"]),
        artifacts=tuple(lists["artifacts"]),
        decisions=tuple(lists["decisions"]),
        errors=tuple(lists["errors"]),
        open_items=tuple(lists["open_items"]),
    )


def artifact_key(item: str) -> str:
    """What names an artifact item: what comes before its description (``src/a.py: edited``,
    ``pytest -q (run_shell)``), else its first path, URL or identifier, else its text."""
    head = _DESCRIBED.split(item, maxsplit=1)
    if len(head) > 1 and head[0].strip():
        return _norm(head[0])
    found = find_artifacts(item, _ARTIFACT_KINDS)
    return found[0].text if found else _norm(item)


def rendered(state: TaskState) -> str:
    """The state as the agent reads it: every anchor, in order, with its items."""
    lines = [HEADER]
    for name, anchor in ANCHORS.items():
        lines.append(anchor)
        if name == "next_step":
            lines.append(state.next_step or NONE)
            continue
        items = getattr(state, name)
        if name == "intent":  # what the user's quoted words hold is not said twice
            items = tuple(i for i in items if not any(i in w for w in state.user_words))
        lines.extend(f"- {item}" for item in items)
        if name == "intent":
            if state.progress:
                lines.append(f"{PROGRESS} {state.progress}")
            if state.user_words:
                lines.append(USER_WORDS)
                lines.extend(_quoted(words) for words in state.user_words)
            if not (items or state.progress or state.user_words):
                lines.append(NONE)
        elif not items:
            lines.append(NONE)
    return "\n".join(lines)


def state_within(
    state: TaskState, tokens: int, count: Callable[[str], int]
) -> tuple[TaskState, int]:
    """``state`` whose rendering fits ``tokens``, and how many items it lost.

    The longest list loses its oldest item first, as the token budget's
    important data does; the next step, the note and the user's words stay.
    """
    lists = {name: list(getattr(state, name)) for name in LISTS}
    dropped = 0
    while count(rendered(_with_lists(state, lists))) > tokens:
        longest = max(lists.values(), key=len)
        if not longest:
            break
        longest.pop(0)
        dropped += 1
    return _with_lists(state, lists), dropped


def parse_answer(text: str, language: str) -> StateUpdate:
    """The updates in a model's answer, whatever its form (empty when it holds none)."""
    data = json_object(text)
    if data is not None:
        return _from_json(data, language)
    body = text.strip()
    if body.startswith(("{", "[", "```")):
        return StateUpdate()  # JSON that does not parse: nothing in it can be trusted
    return _from_prose(body, language)


def json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text``: the whole answer, a fenced block, or one in prose."""
    data = parse_json(text)
    if isinstance(data, dict):
        return data
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            found, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def section_of(label: str, language: str) -> str | None:
    """The section a heading, label or JSON key names, in English or ``language``."""
    words = " ".join(re.sub(r"[^\w\s'-]", " ", label.replace("_", " ")).casefold().split())
    if not words or len(words.split()) > _LABEL_WORDS:
        return None
    for section, by_language in _HEADINGS.items():
        for code in dict.fromkeys(("en", language)):
            for heading in by_language.get(code, ()):
                if re.search(rf"(?<!\w){re.escape(heading)}", words):
                    return section
    return None


def _from_json(data: Mapping[str, Any], language: str) -> StateUpdate:
    added: dict[str, list[str]] = {}
    done: list[str] = []
    next_step = progress = ""
    for key, value in data.items():
        section = section_of(str(key), language)
        items = _items(value)
        if section is None or not items:
            continue
        if section == "next_step":
            next_step = " ".join(items)
        elif section == "progress":
            progress = " ".join(items)
        elif section == "done":
            done.extend(items)
        else:
            added.setdefault(section, []).extend(items)
    return StateUpdate(added, tuple(done), next_step, progress)


def _from_prose(text: str, language: str) -> StateUpdate:
    sections: dict[str, list[str]] = {}
    current: str | None = None
    headed = False
    for line in text.splitlines():
        label, rest = _heading(line, language)
        if label is not None:
            current, headed = label, True
            line = rest
        content = _BULLET.sub("", line).strip()
        if content and current is not None and not _FENCE.match(content) and not _unusable(content):
            sections.setdefault(current, []).append(content)
    if not headed:
        return StateUpdate(progress=" ".join(text.split()))
    return _from_json(sections, language)


def _heading(line: str, language: str) -> tuple[str | None, str]:
    """The section a line opens (a Markdown or bold heading, or a ``Label:``), and its rest."""
    for pattern in (_MARKDOWN_HEADING, _BOLD_HEADING, _LABEL):
        match = pattern.match(_BULLET.sub("", line) if pattern is _LABEL else line)
        if match is None:
            continue
        section = section_of(match["label"], language)
        if section is not None:
            return section, match.groupdict().get("rest") or ""
    return None, line


def _items(value: Any) -> list[str]:
    """A section's value as items: lines of a text, a list's entries, an object's values."""
    if isinstance(value, str):
        if _unusable(value):
            return []
        lines = (_BULLET.sub("", line).strip() for line in value.splitlines())
        return [line for line in lines if line and not _FENCE.match(line) and not _unusable(line)]
    if isinstance(value, Mapping):
        joined = ": ".join(str(v).strip() for v in value.values() if str(v).strip())
        return [joined] if joined and not _unusable(joined) else []
    if isinstance(value, list):
        return [item for entry in value for item in _items(entry)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)]


def _unusable(item: str) -> bool:
    """An item that says nothing: a null word, a placeholder, an error page or body."""
    return (
        is_null(item)
        or item.strip() in (NONE, "-", "...", "…")
        or is_html(item)
        or is_error_body(parse_json(item))
    )


def _joined(kept: Sequence[str], added: Iterable[str], key: Callable[[str], str]) -> list[str]:
    """``kept`` then ``added``, one item per key; a newer item takes an older one's place."""
    out: dict[str, str] = {}
    for item in [*kept, *added]:
        out[key(item)] = item
    return list(out.values())


def _is_done(item: str, done: Sequence[str]) -> bool:
    """Whether a ``done`` entry names ``item``: the same text, or one holding the other."""
    return any(
        d == item or (min(len(d), len(item)) >= 12 and (d in item or item in d)) for d in done
    )


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).casefold().split()).strip(" .;")


def _quoted(words: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in words.splitlines())
