"""``POST /v1/messages/count_tokens``: the tokens of the prompt the next call would send.

The request's conversation is matched against the log (nothing is stored)
and the view's rendering, followed by what is new, is the prompt counted: the
Anthropic upstream's own ``/messages/count_tokens`` when it answers, else
contextfold's local count of the messages and tools: a Claude model's
estimated tokens (``contextfold.core.claude_tokens``), any other model's in the
server's encoding (``o200k_base`` by default). ``X-Contextfold-Count-Source``
says which: ``upstream`` or ``estimate``. The prompt is rendered plain: a fold
carrying Anthropic's compaction block counts as its summary's text, which is
what the block costs.
"""

from __future__ import annotations

import json
import logging

from fastapi.responses import Response

from contextfold.core.claude_tokens import claude_counter
from contextfold.core.tokens import get_counter
from contextfold.server.proxy_flow import Call, peek, read_call, whole
from contextfold.server.proxy_messages import UNMARKED_MESSAGES
from contextfold.server.proxy_shared import proxy_state
from contextfold.server.proxy_upstream import UpstreamError

log = logging.getLogger("contextfold.proxy")
SOURCE = "X-Contextfold-Count-Source"


async def count_tokens(call: Call) -> Response:
    """The count of the compacted prompt, from the upstream or estimated here."""
    asked = await read_call(call, UNMARKED_MESSAGES)
    state = proxy_state(call.request)
    service = call.service
    prompt = await service.run(
        peek,
        service,
        state,
        asked.store_id,
        asked.conversation,
        asked.view,
        asked.budget,
        asked.fitted,
    )
    body = UNMARKED_MESSAGES.upstream_body(asked.body, prompt)
    upstream = state.upstreams.get(UNMARKED_MESSAGES.upstream)
    if upstream is not None:
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        headers = UNMARKED_MESSAGES.upstream_headers(call.request.headers, prompt)
        try:
            answer = await upstream.send(
                "POST", UNMARKED_MESSAGES.upstream_path + "/count_tokens", payload, headers
            )
        except UpstreamError as exc:
            log.warning("count_tokens upstream unreachable, estimating: %s", exc.reason)
        else:
            if answer.status_code < 500:
                counted = await whole(upstream, answer, UNMARKED_MESSAGES, None)
                counted.headers[SOURCE] = "upstream"
                return counted
            await answer.aclose()
            log.warning("count_tokens upstream answered HTTP %d, estimating", answer.status_code)
    model = body.get("model")
    claude = claude_counter(model) if isinstance(model, str) else None
    counter = claude if claude is not None else get_counter(service.memory.encoding)
    tokens = counter.messages(prompt)
    if body.get("tools"):
        tokens += counter.text(json.dumps(body["tools"], ensure_ascii=False))
    return Response(
        json.dumps({"input_tokens": tokens}),
        200,
        media_type="application/json",
        headers={SOURCE: "estimate"},
    )
