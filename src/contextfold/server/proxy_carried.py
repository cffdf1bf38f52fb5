"""Forward a prompt that carries a provider's own compaction, and fall back when it is refused.

A view folding with ``provider-compaction`` renders its fold, for the wire of
the provider that made it, as that provider's items (an OpenAI compaction
item, Anthropic's compaction block), sent verbatim. The provider may refuse
them at any time (an expired or rotated key, a signature that no longer
verifies), with a 4xx that says nothing the proxy could tell apart from any
other bad request. So a refused prompt is sent once more rendered plain (the
view's own text for every fold): when that is taken, the items were what the
provider refused, and their folds are marked refused
(``View.refuse_provider_items``), so every later prompt is plain; when it is
refused too, the items were not the cause and stay. Either way the client gets
the one answer of the second try, never a 5xx of the proxy's making.

``CallRender`` is a call's rendering of its view, for the wire's provider
or plain, and the marking of refused items; ``forward`` sends and falls back,
and says what it sent (``Sent``), so a call can be continued (the recall
tools' rounds, ``contextfold.server.proxy_recall``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from contextfold.core.errors import FoldConflict, InvalidInput
from contextfold.core.messages import Message
from contextfold.core.provider_items import ProviderName, carried_folds
from contextfold.memory.kept import with_kept
from contextfold.memory.matching import LogDigest
from contextfold.memory.session import Session
from contextfold.memory.view import View
from contextfold.server.proxy_shared import ProxyState
from contextfold.server.proxy_upstream import Upstream, refusal_body
from contextfold.server.proxy_wire import Wire

log = logging.getLogger("contextfold.proxy")

REFUSED = frozenset({400, 404, 422})
"""Statuses of a request refused for what it holds; a rate limit (429), the server's own
key refused (401/403/407) or an upstream failure (5xx) says nothing of the items."""


@dataclass(frozen=True)
class CallRender:
    """One call's rendering of its view: for a provider (its items carried) or plain (the
    retry), and the marking of the items the provider refused."""

    state: ProxyState
    session: Session
    log: LogDigest
    view: View
    budget: int | None
    keeps: str | None
    """The wire's ``meta`` key put back on the prompt's logged messages (``memory.kept``)."""
    branch: int
    """The seq the call continues: the branch rendered."""

    def __call__(self, target: ProviderName | None) -> list[Message]:
        view, budget, keeps, log = self.view, self.budget, self.keeps, self.log
        if keeps is None:
            return view.render(budget, branch=self.branch, for_provider=target)
        kept = self.state.kept.of(self.session, log.last_seq, keeps)
        rendered = view.render_report(budget, branch=self.branch, for_provider=target)
        return with_kept(rendered, kept, keeps, log.system)

    def refuse(self, fold_ids: list[str], reason: str) -> None:
        """Mark the provider items of ``fold_ids`` refused: later prompts render plain."""
        sid = self.session.id
        for fold_id in fold_ids:
            try:
                self.view.refuse_provider_items(fold_id, reason)
            except (FoldConflict, InvalidInput) as exc:
                # Another commit came first (the runner folded again): its folds decide.
                log.warning("fold %s of %s not marked refused: %s", fold_id, sid, exc)
            else:
                log.warning("fold %s of %s: provider items refused (%s)", fold_id, sid, reason)


@dataclass(frozen=True)
class Sent:
    """An upstream answer, still to read, and the request it answers: the body and headers
    a next round appends to."""

    answer: httpx.Response
    body: dict[str, Any]
    headers: dict[str, str]


Plain = Callable[[], Awaitable[list[Message]]]
Refuse = Callable[[list[str], str], Awaitable[None]]
Observe = Callable[[dict[str, Any]], object]


async def forward(
    upstream: Upstream,
    wire: Wire,
    body: dict[str, Any],
    client_headers: Mapping[str, str],
    prompt: list[Message],
    plain: Plain,
    refuse: Refuse,
    observe: Observe | None = None,
) -> Sent:
    """Send ``body`` with ``prompt`` upstream; a prompt carrying provider items that is
    refused goes once more as ``plain()`` renders it, and ``refuse(fold_ids, reason)``
    marks the items when that one is taken. Returns the answer to give the client, with
    the request it answers.

    ``observe`` sees each body sent whose prompt carries no items (the Claude
    calibration: its local count has no measure of an item the provider made)."""
    first = await _send(upstream, wire, body, client_headers, prompt, observe)
    carried = carried_folds(prompt)
    if not carried or first.answer.status_code not in REFUSED:
        return first
    status = first.answer.status_code
    data = await upstream.read(first.answer)
    log.warning(
        "upstream answered HTTP %d to a prompt carrying the items of folds %s: %s; sending it "
        "plain",
        status,
        ", ".join(carried),
        upstream.scrub(data),
    )
    again = await _send(upstream, wire, body, client_headers, await plain(), observe)
    if again.answer.status_code < 400:
        error = json.loads(refusal_body(status, data, upstream.secrets))["error"]
        said = error["code"] or error["type"]
        reason = f"{upstream.kind} answered HTTP {status}" + (f" ({said})" if said else "")
        await refuse(carried, reason)
    return again


async def _send(
    upstream: Upstream,
    wire: Wire,
    body: dict[str, Any],
    client_headers: Mapping[str, str],
    prompt: list[Message],
    observe: Observe | None,
) -> Sent:
    sent = wire.upstream_body(body, prompt)
    if observe is not None and not carried_folds(prompt):
        observe(sent)
    headers = wire.upstream_headers(client_headers, prompt)
    return await send_body(upstream, wire, sent, headers)


async def send_body(
    upstream: Upstream, wire: Wire, body: dict[str, Any], headers: dict[str, str]
) -> Sent:
    """POST ``body`` as compact JSON to the wire's upstream path."""
    payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    answer = await upstream.send("POST", wire.upstream_path, payload, headers)
    return Sent(answer, body, headers)
