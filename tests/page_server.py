"""What the page tests stand on: a real uvicorn server on 127.0.0.1 over a temporary
SQLite store, seeded through the REST API, and headless Chromium driven by Playwright.

Chromium is Debian's (``/usr/bin/chromium``, or ``$CONTEXTFOLD_CHROMIUM``), never
one Playwright downloads. A missing browser or driver skips the page tests, and
fails them under ``CI=true``, where a skip would hide that they never ran.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_harness import running as serving

from contextfold.server.app import create_app
from contextfold.server.keys import create_key
from contextfold.server.service import Service
from contextfold.server.settings import Settings

CHROMIUM = Path(os.environ.get("CONTEXTFOLD_CHROMIUM", "/usr/bin/chromium"))
ROOT = Path(__file__).resolve().parents[1]
# Screenshots of every run land here (git-ignored); CONTEXTFOLD_PAGE_SHOTS adds a copy elsewhere.
ARTIFACTS = Path(os.environ.get("CONTEXTFOLD_ARTIFACTS", ROOT / "test-artifacts")) / "page"
MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")


def need_browser() -> None:
    """Skip (fail under CI=true) when Chromium or Playwright is missing."""
    reason = None
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: apt-get install -y chromium (make test does)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "playwright is not installed: pip install -e '.[dev]'"
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@dataclass
class Server:
    """A running app: its base URL, its service, and a client with the key it was given."""

    url: str
    service: Service
    client: httpx.Client

    def post(self, path: str, body: Any, key: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = self.client.post(path, json=body, headers=headers)
        assert response.status_code in (200, 201), response.text
        return response.json()

    def get(self, path: str, key: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = self.client.get(path, headers=headers)
        assert response.status_code == 200, response.text
        return response.json()

    def add_key(self, tenant: str) -> str:
        return create_key(self.service.memory, tenant)

    def seed(
        self,
        sid: str,
        messages: list[dict[str, Any]],
        *,
        meta: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> None:
        self.post("/api/v1/sessions", {"id": sid, "meta": meta or {}}, key)
        for start in range(0, len(messages), 100):
            batch = [_plain(m) for m in messages[start : start + 100]]
            self.post(f"/api/v1/sessions/{sid}/messages", {"messages": batch}, key)


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI fields of a data set's message (its ``meta`` is the data set's own)."""
    return {name: message[name] for name in MESSAGE_FIELDS if name in message}


def demo_messages() -> list[dict[str, Any]]:
    """The packaged demo session: a coding agent's run, tool calls and long outputs."""
    text = files("contextfold").joinpath("data/demo_session.json").read_text(encoding="utf-8")
    loaded: list[dict[str, Any]] = json.loads(text)
    return loaded


@contextmanager
def running(tmp: Path, *, auth: bool) -> Iterator[Server]:
    """Serve a fresh app over ``tmp``/page.db on a free loopback port until the block ends."""
    service = Service(Settings(database=str(tmp / "page.db"), host="127.0.0.1", auth=auth))
    try:
        with serving(create_app(service)) as url, httpx.Client(base_url=url, timeout=60) as client:
            yield Server(url=url, service=service, client=client)
    finally:
        service.close()


def launched_browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright (the page tests' ``browser`` fixture)."""
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM))
        yield launched
        launched.close()


LAPTOP = {"width": 1440, "height": 900}


def opened_page(browser: Any) -> Iterator[Any]:
    """A laptop-sized page (the page tests' ``page`` fixture); a script error on it fails
    the test that used it."""
    context = browser.new_context(viewport=LAPTOP, bypass_csp=True)
    context.set_default_timeout(10_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"script errors on the page: {errors}"


def save_shot(page: Any, name: str) -> Path:
    """A screenshot of the viewport into the artifacts folder, and into
    ``$CONTEXTFOLD_PAGE_SHOTS`` too when set (the docs' images, docs/img)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    extra = os.environ.get("CONTEXTFOLD_PAGE_SHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(extra) / f"page-{name}.png"), full_page=False)
    print(f"screenshot: {path}")
    return path
