"""What the adapter contract runs outside the test's own code: another process
reading the view, and a summarizer's server that answers every call with a 500."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from contextfold.core.messages import Message

_RENDER = """
import json, sys
from contextfold import Memory
url, session, view, branch = sys.argv[1:]
with Memory(url) as memory:
    prompt = memory.existing_session(session).view(view).render(branch=int(branch))
print(json.dumps(prompt))
"""


def rendered_elsewhere(store_url: str, session: str, view: str, branch: int) -> list[Message]:
    """The view's prompt of ``branch`` as a new process renders it from ``store_url``."""
    done = subprocess.run(
        [sys.executable, "-c", _RENDER, store_url, session, view, str(branch)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"the other process failed:\n{done.stderr[-3000:]}")
    prompt: list[Message] = json.loads(done.stdout)
    return prompt


@contextmanager
def failing_endpoint() -> Iterator[tuple[str, list[str]]]:
    """An OpenAI-compatible base URL on 127.0.0.1 whose every answer is a 500 (with
    ``Retry-After: 0``, so retries cost no time), and the paths it was asked for."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hits.append(self.path)
            body = json.dumps({"error": {"message": "summarizer down", "type": "server_error"}})
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads ``hits``."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
