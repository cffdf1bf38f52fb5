"""The recall tools through the proxy: offered to the upstream model, answered by the proxy.

Off by default. On with the server setting ``recall_tools`` (``serve
--recall-tools``, ``CONTEXTFOLD_RECALL_TOOLS``), and per request with the
header ``X-Contextfold-Recall-Tools: on|off``, which wins. When on, a call's
request goes upstream with the recall tools of ``RecallTools``
(``contextfold.memory.recall_tools``: search, expand, folds over the call's
branch) added to its tools, in the wire's own tool shape
(``contextfold.server.proxy_recall_formats``), but only when there is
something to recall (the view has folds) and no client tool has one of their
names. The answer to a call that wants them has an ``X-Contextfold-Recall-Tools``
header saying which: ``on``, ``no-folds`` or ``clash:NAME,...``.

Rounds. An upstream answer that calls a recall tool is not the client's: the
proxy answers each of its calls (``RecallTools.answer``), appends the answer
and the results to the upstream request and asks again, at most
``recall_rounds`` times per client call; the request after the last round
forbids tool calls (``tool_choice`` none), so the model answers with what it
has. An answer that mixes recall calls with the client's is a recall round
too: the client's calls are dropped from it and only the proxy's are
answered, so the model, asked again with the results, calls the client's
tools anew if it still needs them (answering them together would need the
client's results in the same round, which only the client can give). The
first answer that calls no recall tool goes to the client as is
(``X-Contextfold-Recall-Rounds`` says how many rounds came before), and is the
one answer logged: the rounds are not conversation messages (the client's next
resend does not hold them, so logging them would start a branch every turn);
each is published on the session's event stream as a ``recall`` event.

Streaming. While the tools are offered, each round's upstream stream is read
whole before anything goes to the client, since any event may turn out to be
a recall call; the final round's events then go to the client unchanged, as
one well-formed stream (``RelayResponse`` as for any stream, its answer
logged). A stream broken midway ends with the format's error event, as
always. Without the tools, streams pass through as they come.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from contextfold.core.errors import ContextfoldError, InvalidInput
from contextfold.memory.recall_tools import RecallTools, tool_definitions
from contextfold.memory.session import Session
from contextfold.server.proxy_carried import Sent, send_body
from contextfold.server.proxy_recall_formats import (
    RECALL_FORMATS,
    RecallCall,
    RecallFormat,
    UpstreamTurn,
)
from contextfold.server.proxy_upstream import Upstream
from contextfold.server.proxy_wire import Wire
from contextfold.server.service import Service

log = logging.getLogger("contextfold.proxy")

RECALL_HEADER = "X-Contextfold-Recall-Tools"
ROUNDS_HEADER = "X-Contextfold-Recall-Rounds"
_SWITCH = {"on": True, "off": False}
# Headers that described the upstream's bytes on the wire, not the decoded ones passed on.
_ENCODING = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def recall_wanted(setting: bool, header: str | None) -> bool:
    """Whether a call asks for the recall tools: its header (``on``/``off``), else the
    server's setting; another header value is an ``InvalidInput`` naming the header."""
    if header is None:
        return setting
    wanted = _SWITCH.get(header.strip().lower())
    if wanted is None:
        raise InvalidInput(
            f"{RECALL_HEADER} must be on or off, not {header[:40]!r}", field=RECALL_HEADER
        )
    return wanted


def with_recall_tools(body: Mapping[str, Any], wire: Wire) -> dict[str, Any]:
    """``body`` with the recall tools added to its tools, in ``wire``'s tool shape: what
    goes upstream, and what a window-derived budget takes the tools off."""
    out = dict(body)
    RECALL_FORMATS[wire.name].with_tools(out, tool_definitions())
    return out


@dataclass(frozen=True)
class RecallOffer:
    """What one call offers the model: the tools (None: nothing injected) and why, as the
    answer's ``X-Contextfold-Recall-Tools`` says it."""

    tools: RecallTools | None
    state: str


def offer_recall(
    session: Session, view: str, branch: int, body: Mapping[str, Any], wire: Wire
) -> RecallOffer:
    """The recall tools for a call that wants them on ``branch`` of ``session``, when the
    view has folds to recall and no client tool has one of their names (store reads: run
    it through ``Service.run``)."""
    tools = RecallTools(session, view).on(branch)
    clash = sorted(RECALL_FORMATS[wire.name].client_tools(body) & tools.names)
    if clash:
        log.warning(
            "recall tools not offered to %s: the client's tools already have %s",
            session.id,
            ", ".join(clash),
        )
        return RecallOffer(None, "clash:" + ",".join(clash))
    if not tools.view.folds():
        return RecallOffer(None, "no-folds")
    return RecallOffer(tools, "on")


async def open_rounds(
    service: Service,
    session: Session,
    view: str,
    branch: int,
    body: Mapping[str, Any],
    upstream: Upstream,
    wire: Wire,
) -> tuple[RecallRounds | None, str]:
    """A call's recall rounds when the recall tools are offered (``offer_recall``), and the
    answer's ``X-Contextfold-Recall-Tools`` saying whether they are."""
    offer = await service.run(offer_recall, session, view, branch, body, wire)
    if offer.tools is None:
        return None, offer.state
    bound = service.settings.recall_rounds
    return RecallRounds(upstream, wire, offer.tools, service, session, bound), offer.state


@dataclass(frozen=True)
class RecallRounds:
    """A call's recall rounds: where it goes, what answers the calls, whom to tell."""

    upstream: Upstream
    wire: Wire
    tools: RecallTools
    service: Service
    session: Session
    bound: int
    """The most rounds answered; the request after the last forbids tool calls."""

    @property
    def format(self) -> RecallFormat:
        return RECALL_FORMATS[self.wire.name]

    async def run(self, first: Sent, streamed: bool) -> tuple[httpx.Response, int]:
        """From the first round's answer to the one the client gets, and the rounds
        answered before it. The returned response's body is read already (replayed)."""
        sent, rounds = first, 0
        while True:
            data, broken = await _take(sent.answer, self.upstream, streamed)
            answer = _replayed(sent.answer, data, broken)
            if broken is not None or sent.answer.status_code != 200:
                return answer, rounds
            turn = self.format.read(data, streamed)
            ours = [] if turn is None else [c for c in turn.calls if c.name in self.tools.names]
            if turn is None or not ours or rounds >= self.bound:
                return answer, rounds
            rounds += 1
            results = await self.service.run(self._answer, ours)
            self._publish(rounds, turn, results)
            body = self.format.continued(sent.body, turn, results)
            if rounds >= self.bound:
                self.format.forbid_calls(body)
            sent = await send_body(self.upstream, self.wire, body, sent.headers)

    def _answer(self, calls: list[RecallCall]) -> list[tuple[RecallCall, str]]:
        out = []
        for call in calls:
            try:
                result = self.tools.answer(call.name, call.arguments)
            except ContextfoldError as exc:
                # The store failed under a lookup: the model is told, the call goes on.
                log.warning("recall tool %s failed for %s: %s", call.name, self.session.id, exc)
                result = json.dumps({"error": f"the lookup failed: {type(exc).__name__}"})
            out.append((call, result))
        return out

    def _publish(
        self, round_: int, turn: UpstreamTurn, results: list[tuple[RecallCall, str]]
    ) -> None:
        """A ``recall`` event on the session's stream: the calls answered and their results."""
        dropped = [c.name for c in turn.calls if c.name not in self.tools.names]
        data = {
            "session": self.session.id.partition("/")[2],
            "view": self.tools.view.name,
            "round": round_,
            "calls": [
                {"id": call.id, "name": call.name, "arguments": _arguments(call), "result": result}
                for call, result in results
            ],
            "dropped": dropped,
        }
        self.service.hub.publish(self.session.id, {"event": "recall", "data": data})


def _arguments(call: RecallCall) -> Any:
    """The call's arguments as JSON data when they parse, else as sent."""
    if isinstance(call.arguments, str):
        try:
            return json.loads(call.arguments)
        except ValueError:
            return call.arguments
    return dict(call.arguments)


async def _take(
    answer: httpx.Response, upstream: Upstream, streamed: bool
) -> tuple[bytes, httpx.HTTPError | None]:
    """The answer's whole body, and the error that broke a stream midway (what came before
    it is kept, so the client's stream ends as a broken stream does)."""
    if not streamed or answer.status_code != 200:
        return await upstream.read(answer), None
    chunks: list[bytes] = []
    try:
        async for chunk in answer.aiter_bytes():
            chunks.append(chunk)
    except httpx.HTTPError as exc:
        return b"".join(chunks), exc
    finally:
        await answer.aclose()
    return b"".join(chunks), None


def _replayed(
    answer: httpx.Response, data: bytes, broken: httpx.HTTPError | None
) -> httpx.Response:
    """A response of ``data`` read from ``answer`` (then ``broken``, if it broke), to give
    the client as ``answer`` would have been given."""
    headers = [(k, v) for k, v in answer.headers.items() if k.lower() not in _ENCODING]

    async def body() -> AsyncIterator[bytes]:
        yield data
        if broken is not None:
            raise broken

    return httpx.Response(
        answer.status_code, headers=headers, content=body(), request=answer.request
    )
