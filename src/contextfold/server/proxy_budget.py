"""The proxy's budget: what a prompt may take in the window of the request's model.

The budget is the model's context window less the room kept for the answer:
the request's ``max_completion_tokens`` (Responses: ``max_output_tokens``, Messages:
``max_tokens``) when it sets one,
else ``ANSWER_RESERVE`` tokens, at most a quarter of the window. The window is
looked up by the request's ``model`` in the server's ``[model_windows]`` table
first, then in the known models (``contextfold.llm.windows``). A model in
neither gets ``FALLBACK_BUDGET``, a size every chat model of today holds; the
fallback is logged and reported like every budget (an event ``budget`` on the
session's stream, the ``X-Contextfold-Budget-Source`` header).

``serve --budget N`` fixes the budget: no window is looked up. The view the
proxy creates keeps the budget of its first request; a later request whose
model has less room renders to that smaller budget without changing the view.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.llm.windows import KNOWN, Window, find_window
from contextfold.memory.session import Session
from contextfold.server.service import Service

log = logging.getLogger("contextfold.proxy")

ANSWER_RESERVE = 16_384
"""Tokens left for the answer when the request sets no limit (OpenAI's 128k models' longest)."""
FALLBACK_BUDGET = 8_000


@dataclass(frozen=True)
class Fit:
    """The budget for one request, and how it was found."""

    budget: int
    source: str
    """``flag`` (serve --budget), ``config`` ([model_windows]), ``table`` (known models),
    or ``fallback`` (a model in neither)."""
    model: str | None = None
    window: int | None = None
    reserve: int | None = None
    origin: str | None = None
    """Where the window's number was read (a vendor's page, or the config file)."""

    def data(self) -> dict[str, Any]:
        return asdict(self)

    def choose(self, asked: int | None, stored: int | None) -> tuple[int | None, str]:
        """The budget to render a request to (None: the view's own) and its source:
        ``asked`` (the request's header) first, then this fit when it is no larger
        than the view's ``stored`` budget."""
        if asked is not None:
            return asked, "header"
        if self.source == "flag":
            return None, "flag" if stored == self.budget else "view"
        if stored is None or self.budget <= stored:
            return self.budget, self.source
        return None, "view"

    def describe(self) -> str:
        if self.source == "flag":
            return f"{self.budget} (serve --budget)"
        if self.window is None:
            return f"{self.budget} (fallback: no window known for model {self.model!r})"
        return (
            f"{self.budget} ({self.source}: window {self.window} of {self.model!r} "
            f"less {self.reserve} for the answer)"
        )


def fit(fixed: int | None, windows: Mapping[str, Window], body: Mapping[str, Any]) -> Fit:
    """The budget of the request ``body`` (``fixed``: serve's ``--budget``)."""
    if fixed is not None:
        return Fit(fixed, "flag")
    model = body.get("model")
    model = model if isinstance(model, str) and model else None
    found = None if model is None else find_window(model, windows)
    source = "config"
    if found is None and model is not None:
        found, source = find_window(model, KNOWN), "table"
    if found is None:
        return Fit(FALLBACK_BUDGET, "fallback", model)
    window = found[1]
    asked = _answer_limit(body)
    reserve = asked if asked is not None else min(ANSWER_RESERVE, window.tokens // 4)
    if reserve >= window.tokens:
        name = next(n for n in _ANSWER_LIMITS if body.get(n) is not None)
        raise InvalidInput(
            f"{name} {reserve} leaves no room for a prompt in the {window.tokens}-token "
            f"window of {model!r}",
            field=name,
        )
    return Fit(window.tokens - reserve, source, model, window.tokens, reserve, window.source)


_ANSWER_LIMITS = ("max_completion_tokens", "max_output_tokens", "max_tokens")
"""Where a request sets its answer's length: Chat Completions, Responses, Messages."""


def _answer_limit(body: Mapping[str, Any]) -> int | None:
    for name in _ANSWER_LIMITS:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(f"{name} must be a positive integer", field=name)
        return value
    return None


def create_view(service: Service, session: Session, name: str, fitted: Fit) -> None:
    """The proxy's view on first use, with the server's preset and model and ``fitted``'s
    budget; how that budget was found goes to the log and the session's stream."""
    settings = service.settings
    session.view(name, preset=settings.view_preset, budget=fitted.budget, model=settings.model)
    level = logging.WARNING if fitted.source == "fallback" else logging.INFO
    log.log(level, "view %s of %s: budget %s", name, session.id, fitted.describe())
    data = {"session": session.id.partition("/")[2], "view": name, **fitted.data()}
    service.hub.publish(session.id, {"event": "budget", "data": data})
