"""The proxy's one flow, whatever the wire format: match, append, render, forward, log.

A call (``serve``) reads the body and headers, takes the session's lock,
matches the client's conversation (``Wire.conversation``) against the log's
branches and appends what is new where it parts from them
(``Session.record``; a regenerate or an edit starts a branch),
renders the view's prompt of that branch for the budget of the request's
model (``contextfold.server.proxy_budget``), for the wire's provider (a fold
of that provider's own compaction shows its items), forwards the wire's
request with the rendered prompt to the upstream of the wire's kind (sent
again plain when the provider refuses its items:
``contextfold.server.proxy_carried``), and answers: a stream relayed event by event and assembled
(``contextfold.server.proxy_stream``), or a whole answer; either is logged
once complete. An upstream failure appends no answer: the log keeps the
client's messages, so a retry of the same conversation goes on from there.

A conversation that ``continues`` a previous response (the Responses API's
``previous_response_id``) is the branch ending at the answer logged under that
id, followed by the request's messages: the answer is found by its idempotency
key (``response_key``), so the lookup is one indexed read.

With the recall tools on (``contextfold.server.proxy_recall``), the request
goes with them, and the proxy answers the model's calls to them in rounds
before the client gets the first answer that calls none; only that answer is
logged.

Calls on one session are served one at a time in a process (a lock held from
the match until the answer is logged): of two identical concurrent calls, the
second finds the first's answer logged and regenerates it (a branch).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import Request
from fastapi.responses import Response

from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.messages import Message, validate_messages
from contextfold.core.provider_items import ProviderName
from contextfold.memory.matching import LogDigest, LogDigests, Match, append_keys, match
from contextfold.memory.session import Session
from contextfold.server.errors import ServiceError
from contextfold.server.models import MAX_MESSAGES
from contextfold.server.proxy_budget import Fit, create_view, fit
from contextfold.server.proxy_carried import CallRender, forward
from contextfold.server.proxy_recall import (
    RECALL_HEADER,
    ROUNDS_HEADER,
    open_rounds,
    recall_wanted,
    with_recall_tools,
)
from contextfold.server.proxy_request import (
    agent_traffic,
    check_json_type,
    check_new,
    read_body,
    read_budget,
    read_session_id,
    read_view_name,
)
from contextfold.server.proxy_shared import ProxyState, proxy_state
from contextfold.server.proxy_stream import RelayResponse
from contextfold.server.proxy_upstream import (
    Upstream,
    UpstreamError,
    failure_of,
    mask_secrets,
    passed_headers,
)
from contextfold.server.proxy_wire import Conversation, Wire
from contextfold.server.service import Service

log = logging.getLogger("contextfold.proxy")


def response_key(response_id: str) -> str:
    """The idempotency key an answer carrying a response id is logged under."""
    return f"proxy:response:{response_id}"


def _answer_key(answer: Message, at: int) -> str:
    """The key an answer logged after seq ``at`` goes under: its response id's, if any."""
    meta = answer.get("meta")
    found = meta.get("responses") if isinstance(meta, Mapping) else None
    if isinstance(found, Mapping) and isinstance(found.get("id"), str) and found["id"]:
        return response_key(found["id"])
    return append_keys(at, [answer])[0]


@dataclass
class _Turn:
    """One call's side of the session: where it is, and how to log the answer."""

    service: Service
    session: Session
    log: LogDigest
    digests: LogDigests
    prompt: list[Message]
    headers: dict[str, str]
    """The budget the prompt was rendered to, and where it came from, for the client."""
    at: int
    """The seq the call continues: its answer is logged after it, on that branch."""
    render: CallRender

    async def log_answer(self, answer: Message) -> None:
        await self.service.run(self._append, answer)

    async def refuse(self, fold_ids: list[str], reason: str) -> None:
        await self.service.run(self.render.refuse, fold_ids, reason)

    def truncated(self, reason: str) -> None:
        """Tell the session's event streams that a streamed answer was cut short."""
        data = {"session": self.session.id.partition("/")[2], "reason": reason}
        self.service.hub.publish(self.session.id, {"event": "truncated", "data": data})

    def _append(self, answer: Message) -> None:
        keys = [_answer_key(answer, self.at)]
        with self.log.lock:
            logged = self.session.extend([answer], keys=keys, parent=self.at)
            self.digests.advance(self.session.id, self.log, logged)


def _match(session: Session, log: LogDigest, conversation: Conversation) -> Match:
    """Where the client's conversation meets the log (``matching.match``), for a peek."""
    return match(log, conversation.messages, after=_continued(session, conversation))


def _continued(session: Session, conversation: Conversation) -> int | None:
    """The seq a continued response goes on from (the logged answer), or None."""
    if conversation.continues is None:
        return None
    key = response_key(conversation.continues)
    found = session.keyed([key]).get(key)
    if found is None:
        raise ServiceError(
            400,
            "invalid_input",
            f"previous_response_id {conversation.continues!r} names no answer logged in this "
            "session",
            field="previous_response_id",
        )
    return found.seq


def _prepare(
    service: Service,
    state: ProxyState,
    store_id: str,
    conversation: Conversation,
    view_name: str,
    budget: int | None,
    fitted: Fit,
    keeps: str | None = None,
    target: ProviderName | None = None,
    agent: bool = False,
) -> _Turn:
    """Match and append the client's new messages, then render the view (for ``target``:
    a fold keeping that provider's own compaction shows its items).

    Runs through ``Service.run``: on the loop for SQLite and RAM, on a worker
    thread for a store that waits on a network.
    """
    messages = conversation.messages
    try:
        session = service.memory.existing_session(store_id)
    except NotFound:
        if conversation.continues is not None:
            raise ServiceError(
                400,
                "invalid_input",
                f"previous_response_id {conversation.continues!r} names no answer logged in "
                "this session (the session has none)",
                field="previous_response_id",
            ) from None
        # A new session's messages are all new: refuse bad ones before creating it.
        check_new(len(messages))
        validate_messages(messages)
        session = service.memory.session(store_id)
    recorded = session.record(messages, after=_continued(session, conversation), most=MAX_MESSAGES)
    at = recorded.at
    digests = service.memory.digests
    log = digests.current(session)
    ready = (view_name, id(service.runner))
    if ready not in log.views:
        if session.view(view_name).version == 0:
            create_view(service, session, view_name, fitted, agent=agent)
        service.watch(session, view_name)
        log.views.add(ready)
    view = session.view(view_name)
    budget, source = fitted.choose(budget, view.config.budget)
    render = CallRender(state, session, log, view, budget, keeps, at)
    prompt = render(target)
    shown = str(budget if budget is not None else view.config.budget)
    headers = {
        "X-Contextfold-Budget": shown,
        "X-Contextfold-Budget-Source": source,
        "X-Contextfold-Budget-Tools": str(fitted.subtracted(source)),
    }
    return _Turn(service, session, log, digests, prompt, headers, at, render)


def peek(
    service: Service,
    state: ProxyState,
    store_id: str,
    conversation: Conversation,
    view_name: str,
    budget: int | None,
    fitted: Fit,
) -> list[Message]:
    """The prompt a call with ``conversation`` would send, nothing stored: the view's
    rendering followed by the messages new to the log (the conversation itself for a
    session or view not made yet)."""
    try:
        session = service.memory.existing_session(store_id)
    except NotFound:
        return conversation.messages
    log = service.memory.digests.current(session)
    found = _match(session, log, conversation)
    new = conversation.messages[found.matched :]
    view = session.view(view_name)
    if view.version == 0:
        return [*session.history(branch=found.at or None), *new]
    chosen, _ = fitted.choose(budget, view.config.budget)
    return [*view.render(chosen, branch=found.at), *new]


@dataclass(frozen=True)
class Call:
    """A proxy request as its route received it: the caller and the proxy's headers."""

    request: Request
    tenant: str
    service: Service
    session: str | None
    view: str | None
    budget: str | None
    recall_tools: str | None = None
    """The ``X-Contextfold-Recall-Tools`` header."""


@dataclass(frozen=True)
class Asked:
    """A request read and checked, before the session is touched."""

    body: dict[str, Any]
    conversation: Conversation
    store_id: str
    view: str
    budget: int | None
    fitted: Fit
    recall: bool = False
    """Whether the call wants the recall tools (its header, else the server's setting)."""
    agent: bool = False
    """Whether the call is an agent's (``proxy_request.agent_traffic``): the view it
    creates gets the agent's default preset."""


async def read_call(call: Call, wire: Wire) -> Asked:
    """The request's body, conversation, session, view and budget; 4xx on bad input."""
    check_json_type(call.request.headers.get("content-type"))
    body = read_body(await call.request.body())
    sid = read_session_id(call.session, body)
    view_name = read_view_name(call.view)
    budget = read_budget(call.budget)
    settings = call.service.settings
    recall = recall_wanted(settings.recall_tools, call.recall_tools)
    calibration = proxy_state(call.request).calibration
    # The recall tools, when wanted, are taken off a window-derived budget as the client's are.
    sized = with_recall_tools(body, wire) if recall else body
    fitted = fit(settings.budget, settings.model_windows, sized, calibration)
    conversation = wire.conversation(body)
    store_id = call.service.store_id(call.tenant, sid)
    agent = agent_traffic(wire.name, body, conversation.messages)
    return Asked(body, conversation, store_id, view_name, budget, fitted, recall, agent)


async def serve(call: Call, wire: Wire) -> Response:
    """One proxied call in ``wire``'s format, from the request to the logged answer."""
    request, service = call.request, call.service
    asked = await read_call(call, wire)
    body, conversation, store_id = asked.body, asked.conversation, asked.store_id
    view_name, budget, fitted = asked.view, asked.budget, asked.fitted
    state = proxy_state(request)
    upstream = state.upstream(wire)
    release = await state.hold(store_id)
    try:
        turn = await service.run(
            _prepare,
            service,
            state,
            store_id,
            conversation,
            view_name,
            budget,
            fitted,
            wire.keeps,
            wire.provider,
            asked.agent,
        )

        async def plain() -> list[Message]:
            return await service.run(turn.render, None)

        rounds = None
        if asked.recall:
            rounds, turn.headers[RECALL_HEADER] = await open_rounds(
                service, turn.session, view_name, turn.at, body, upstream, wire
            )
        # The compacted Messages body calibrates Claude's factor, off the call's path.
        calibration = state.calibration if wire.upstream == "anthropic" else None
        observe = None if calibration is None else calibration.observe
        try:
            sent = await forward(
                upstream,
                wire,
                body if rounds is None else with_recall_tools(body, wire),
                request.headers,
                turn.prompt,
                plain,
                turn.refuse,
                observe,
            )
            answer = sent.answer
            if rounds is not None:
                answer, answered = await rounds.run(sent, bool(body.get("stream")))
                turn.headers[ROUNDS_HEADER] = str(answered)
        except UpstreamError as exc:
            raise ServiceError(502, "upstream_error", exc.reason) from exc
        if body.get("stream") and answer.status_code == 200:
            relay = RelayResponse(
                answer,
                wire.assembler(),
                turn.log_answer,
                turn.session.id,
                release,
                truncated=turn.truncated,
                secrets=upstream.secrets,
            )
            relay.headers.update(turn.headers)
            release = _nothing
            return relay
        return await whole(upstream, answer, wire, turn)
    finally:
        release()


def _nothing() -> None:
    """The release of a lock the streamed response now holds."""


async def whole(
    upstream: Upstream, answer: httpx.Response, wire: Wire, turn: _Turn | None
) -> Response:
    """A whole upstream answer back to the client, and logged when it is an answer.

    An error answer's body stays in the server's log (secrets masked): the
    client gets its status and a fixed message (``Wire.refusal``).
    """
    try:
        data = await upstream.read(answer)
    except UpstreamError as exc:
        raise ServiceError(502, "upstream_error", exc.reason) from exc
    status = answer.status_code
    if status >= 400:
        where = f"for {turn.session.id}" if turn is not None else f"for {wire.name}"
        log.warning("upstream answered HTTP %d %s: %s", status, where, upstream.scrub(data))
        failure = failure_of(status)
        if failure is not None:
            raise ServiceError(502, "upstream_error", failure.reason)
        data = wire.refusal(status, data, upstream.secrets)
    elif turn is not None and status < 300:
        try:
            message = wire.answer(data)
            if message is None:
                raise InvalidInput(
                    f"the upstream's {wire.name} answer has no message", field="body"
                )
            await turn.log_answer(message)
        except InvalidInput as exc:
            # The upstream's answer, not the client's fault: it goes back unchanged; the
            # client's next call sends it, and is told then what the log cannot keep.
            log.warning("answer for %s not logged: %s", turn.session.id, exc)
    if status < 400:
        data = mask_secrets(data, upstream.secrets)
    headers = passed_headers(answer.headers, upstream.secrets)
    if status >= 400:
        headers["content-type"] = "application/json"
    if turn is not None:
        headers.update(turn.headers)
    return Response(data, status, headers=headers)
