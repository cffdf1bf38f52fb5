"""Schemathesis against the served OpenAPI spec: cases run, and how many got a 5xx.

Every operation of ``/openapi.json`` (the event stream aside: it never ends),
the proxy's included with an instant upstream on 127.0.0.1, is fuzzed with valid and invalid requests, with random path ids and with the
ids of a seeded session and view, all with a valid API key so requests get
past auth into the handlers. A 5xx is a bug: the figure to hold at zero.

    python bench/api_schema.py [--quick] [--json] [--examples N]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from _common import parse_args, report

EXAMPLES = 40
QUICK_EXAMPLES = 8


@dataclass
class Fuzzed:
    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    unsatisfiable: int = 0

    @property
    def count_5xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


ANSWER = {
    "id": "chatcmpl-fuzz",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "fuzz",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
MODELS = {"object": "list", "data": [{"id": "fuzz", "object": "model", "owned_by": "bench"}]}


class Upstream:
    """An instant OpenAI-compatible server on 127.0.0.1 for the proxy to forward to."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._answer(json.dumps(MODELS).encode(), "application/json")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if b'"stream":true' in body.replace(b" ", b""):
                    chunk = {**ANSWER, "object": "chat.completion.chunk"}
                    chunk["choices"] = [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": "ok"},
                            "finish_reason": "stop",
                        }
                    ]
                    data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                    self._answer(data, "text/event-stream")
                else:
                    self._answer(json.dumps(ANSWER).encode(), "application/json")

            def _answer(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def seeded_app(upstream: str | None = None) -> tuple[Any, Any, str]:
    """An app over a fresh in-memory store, a key, and session ``s1`` with view ``default``;
    its proxy forwards to ``upstream`` (``openai-compatible:URL``)."""
    import time as clock

    from contextfold.core.log import ApiKey
    from contextfold.server.app import create_app
    from contextfold.server.keys import hash_secret, new_key
    from contextfold.server.service import Service
    from contextfold.server.settings import Settings
    from contextfold.store.ram import RAMStore

    service = Service(Settings(runner=False, upstream=upstream), store=RAMStore())
    key_id, secret, key = new_key()
    service.memory.api_keys.put(ApiKey(key_id, "fuzz", hash_secret(secret), "", clock.time()))
    session = service.create("fuzz", "s1", system="You are terse.")
    for i in range(20):
        session.extend(
            [
                {"role": "user", "content": f"question {i} " + "word " * 40},
                {"role": "assistant", "content": f"answer {i} " + "word " * 60},
            ]
        )
    session.view("default", preset="offline", budget=1500)
    return create_app(service), service, key


def fuzz(app: Any, key: str, examples: int) -> Fuzzed:
    """Run ``examples`` cases per operation, mode and path choice; count the answers."""
    import schemathesis
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex=r"/events$")
    found = Fuzzed()
    auth = {"Authorization": f"Bearer {key}"}
    known = {"sid": "s1", "name": "default"}
    operations = [result.ok() for result in schema.get_all_operations()]
    # Deleting the seeded session comes last, so the other operations find it.
    operations.sort(key=lambda op: op.method.upper() == "DELETE")
    for operation in operations:
        names = {p.name for p in operation.path_parameters}
        headers = dict(auth)
        if operation.path.startswith("/v1/"):  # the proxy's session, a header of the client's
            headers["X-Contextfold-Session"] = "fuzz-proxy"
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for fixed in ({}, {k: v for k, v in known.items() if k in names}):
                strategy = operation.as_strategy(mode, path_parameters=fixed or None)
                try:
                    cases(strategy, headers, examples, found)()
                except Unsatisfiable:  # nothing left to make invalid once the ids are fixed
                    found.unsatisfiable += 1
    return found


def cases(strategy: Any, headers: dict[str, str], examples: int, found: Fuzzed) -> Any:
    """A hypothesis test sending ``examples`` cases drawn from ``strategy``."""
    from hypothesis import HealthCheck, Verbosity, given, settings

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        answer = case.call(headers=headers)
        found.cases += 1
        found.statuses[answer.status_code] += 1
        if answer.status_code >= 500:
            found.server_errors.append(
                f"{case.method} {case.formatted_path} -> {answer.status_code}: {answer.text[:200]}"
            )

    return run


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--examples", type=int, help="cases per operation, mode and path")

    args = parse_args(__doc__ or "", options)
    examples = args.examples or (QUICK_EXAMPLES if args.quick else EXAMPLES)
    upstream = Upstream()
    app, service, key = seeded_app(f"openai-compatible:{upstream.url}")
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = fuzz(app, key, examples)
    finally:
        service.close()
        upstream.close()
    for line in found.server_errors[:10]:
        print("5xx:", line)
    figures: dict[str, Any] = {
        "cases": found.cases,
        "server_errors_5xx": found.count_5xx,
        "statuses": dict(sorted(found.statuses.items())),
        "examples_per_operation_mode_path": examples,
        "seconds": time.perf_counter() - started,
    }
    report(figures, args.json)


if __name__ == "__main__":
    main()
