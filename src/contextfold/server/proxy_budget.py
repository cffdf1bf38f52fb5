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

The formula is ``contextfold.llm.windows.room``, the library's too; the
server's own entries are ``serve --model-window`` over ``[model_windows]``.

A window is in the model's own tokens and a budget in the view's
(``o200k_base``). For a Claude model the room is divided by the factor of
Claude tokens per ``o200k_base`` token: the stated estimate of the model's
vocabulary (``contextfold.core.claude_tokens``), or the one a ``Calibration``
measured with the upstream's ``count_tokens`` when that is higher. A measured
factor never lowers the estimate: measured on some conversations, it serves
them all, and on the benchmark's mixed conversations a lower one undercounted
some of them.

The request's tool definitions (``tools``) go to the model with every call,
so a budget from the window is less what they take (``tools_tokens``). An
explicit budget (``serve --budget``, the ``X-Contextfold-Budget`` header, a
view's stored budget) is not: it is what the conversation may take, set by
someone who sees the tools, and the fallback is a guess of a window, not one.

``serve --budget N`` fixes the budget: no window is looked up. The view the
proxy creates keeps the budget of its first request before its tools; a later
request whose model has less room (or whose tools take more) renders to that
smaller budget without changing the view.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.tokens import get_counter
from contextfold.llm.claude_calibration import Calibration, CountTokens
from contextfold.llm.windows import Window, room
from contextfold.memory.pin_rules import AGENT_PINS
from contextfold.memory.session import Session
from contextfold.server.proxy_messages import ANTHROPIC_VERSION
from contextfold.server.proxy_upstream import Upstream, UpstreamError
from contextfold.server.service import Service

log = logging.getLogger("contextfold.proxy")

FALLBACK_BUDGET = 8_000


@dataclass(frozen=True)
class Fit:
    """The budget for one request, and how it was found."""

    budget: int
    source: str
    """``flag`` (serve --budget), ``config`` (--model-window, [model_windows]), ``table``
    (known models), or ``fallback`` (a model in neither)."""
    model: str | None = None
    window: int | None = None
    reserve: int | None = None
    origin: str | None = None
    """Where the window's number was read (a vendor's page, the config file, a flag)."""
    factor: float | None = None
    """The model's tokens per token of the view's count (Claude models), else None."""
    counted: str | None = None
    """Where ``factor`` came from: ``count_tokens`` (calibrated) or ``estimate``."""
    tools: int = 0
    """What the request's tool definitions take of the window, taken off ``budget`` (a
    budget from the window only: ``table`` or ``config``)."""

    def data(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def room(self) -> int:
        """The budget before the tools: what a view the proxy creates keeps, since the next
        request may carry other tools, or none."""
        return self.budget + self.tools

    def subtracted(self, source: str) -> int:
        """The tools' tokens taken off the budget a request rendered to, from ``source``
        (``choose``): none unless it is this fit's own."""
        return self.tools if source == self.source else 0

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
        scaled = ""
        if self.factor is not None:
            scaled = f", at {self.factor} of its tokens a token ({self.counted})"
        tools = f"; the request's tools take {self.tools} of it" if self.tools else ""
        return (
            f"{self.room} ({self.source}: window {self.window} of {self.model!r} "
            f"less {self.reserve} for the answer{scaled}){tools}"
        )


def fit(
    fixed: int | None,
    windows: Mapping[str, Window],
    body: Mapping[str, Any],
    calibration: Calibration | None = None,
) -> Fit:
    """The budget of the request ``body`` (``fixed``: serve's ``--budget``); a Claude
    model's room is scaled by its estimated factor, or ``calibration``'s when higher."""
    if fixed is not None:
        return Fit(fixed, "flag")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return Fit(FALLBACK_BUDGET, "fallback")
    asked = _answer_limit(body)
    measured = None if calibration is None else calibration.factor(model)
    name = next((n for n in _ANSWER_LIMITS if body.get(n) is not None), "max_tokens")
    found = room(model, answer=asked, windows=windows, measured=measured, answer_field=name)
    if found is None:
        return Fit(FALLBACK_BUDGET, "fallback", model)
    tools = tools_tokens(body)
    if tools >= found.budget:
        raise InvalidInput(
            f"the tool definitions take {tools} tokens, all of the {found.budget} that the "
            f"window of {model!r} leaves for a prompt",
            field="tools",
        )
    return Fit(
        found.budget - tools,
        "config" if found.given else "table",
        model,
        window=found.window,
        reserve=found.reserve,
        origin=found.source,
        factor=found.factor,
        counted=found.counted,
        tools=tools,
    )


_TOOL_FIELDS = ("tools", "functions")
"""Where a request defines its tools: every format's ``tools``, Chat Completions' older
``functions``."""


def tools_tokens(body: Mapping[str, Any]) -> int:
    """What a request's tool definitions take of every call's window, in the budget's
    tokens (``o200k_base``; a Claude model's room is already divided by its factor): their
    JSON counted as text. Providers render tools in their own way, so this is an estimate."""
    defined = [body[name] for name in _TOOL_FIELDS if isinstance(body.get(name), list)]
    if not any(defined):
        return 0
    return _tokens_of(json.dumps(defined[0] if len(defined) == 1 else defined, ensure_ascii=False))


@lru_cache(maxsize=256)
def _tokens_of(text: str) -> int:
    """Counted once per distinct definition: an agent sends the same tools on every call."""
    return get_counter("o200k_base").text(text)


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


_VERSION = {"anthropic-version": ANTHROPIC_VERSION}


def upstream_count(upstream: Upstream, path: str = "/messages/count_tokens") -> CountTokens:
    """The ``count`` of a ``Calibration``: Anthropic's ``count_tokens`` at ``path`` under the
    upstream's base URL (``https://api.anthropic.com/v1``), with the API version Anthropic
    requires of every request; any failure raises."""

    async def count(body: Mapping[str, Any]) -> int:
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        answer = await upstream.send("POST", path, payload, _VERSION)
        data = await upstream.read(answer)
        if answer.status_code != 200:
            raise UpstreamError(f"count_tokens answered HTTP {answer.status_code}")
        tokens = json.loads(data).get("input_tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise UpstreamError("count_tokens answered no input_tokens")
        return tokens

    return count


def create_view(service: Service, session: Session, name: str, fitted: Fit, *, agent: bool) -> None:
    """The proxy's view on first use, with the server's preset (for an ``agent``'s traffic
    or a chat's) and model, ``fitted``'s budget before the tools, and an agent CLI's to-do
    list and rule files pinned (``AGENT_PINS``: they match nothing in a plain chat); how
    that budget was found, and what the request's tools take of it on every call, go to
    the log and the session's stream."""
    settings = service.settings
    session.view(
        name,
        preset=settings.view_preset(agent=agent),
        budget=fitted.room,
        model=settings.model,
        pins=AGENT_PINS,
    )
    level = logging.WARNING if fitted.source == "fallback" else logging.INFO
    log.log(level, "view %s of %s: budget %s", name, session.id, fitted.describe())
    data = {
        "session": session.id.partition("/")[2],
        "view": name,
        **fitted.data(),
        "budget": fitted.room,
    }
    service.hub.publish(session.id, {"event": "budget", "data": data})
