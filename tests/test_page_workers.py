"""The page of a service with Celery workers (``serve --workers``), in headless Chromium:
a view's pending job shows in its panel while no worker runs (state, since when), a
parked view's reason shows, and the job line goes once a worker has folded the view.
The page is served with its content security policy on (no inline script)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from conftest import NATO
from page_server import Server, save_shot
from server_harness import running
from workers_harness import REDIS, fresh_queue, worker

from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings

LAPTOP = {"width": 1440, "height": 900}
WAIT_MS = 60_000


@contextmanager
def serving(database: str, queue: str) -> Iterator[Server]:
    settings = Settings(database=database, auth=False, workers=REDIS, queue=queue, settle_s=0.05)
    service = Service(settings)
    try:
        with running(create_app(service)) as base, httpx.Client(base_url=base, timeout=60) as c:
            assert service.workers is not None and service.workers.listening(60)
            yield Server(url=base, service=service, client=c)
    finally:
        service.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=LAPTOP)  # the CSP is not bypassed
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    refused = "Content Security Policy"  # what the browser says when the CSP blocks a script
    opened.on("console", lambda m: errors.append(m.text) if refused in m.text else None)
    yield opened
    context.close()
    assert not errors, f"script errors on the page: {errors}"


def chat(server: Server, sid: str, turns: int, start: int = 0) -> None:
    words = " ".join(NATO)
    for turn in range(start, start + turns):
        server.post(
            f"/api/v1/sessions/{sid}/messages",
            {
                "messages": [
                    {"role": "user", "content": f"question {turn} " + words * 4},
                    {"role": "assistant", "content": f"answer {turn} " + words * 6},
                ]
            },
        )


def open_view(page: Any, server: Server, sid: str, **view: Any) -> None:
    server.post("/api/v1/sessions", {"id": sid, "system": "You are helpful."})
    server.client.put(f"/api/v1/sessions/{sid}/views/default", json=view).raise_for_status()
    page.goto(f"{server.url}/sessions/{sid}")
    page.wait_for_selector("#report[data-tokens]:not([data-tokens=''])")
    page.wait_for_selector("#live[data-state='live']")


def test_a_pending_job_shows_until_a_worker_folds_the_view(page: Any, database: str) -> None:
    with fresh_queue() as queue, serving(database, queue) as server:
        open_view(page, server, "waiting", preset="offline", budget=1500)
        assert page.locator("#job").is_hidden()
        chat(server, "waiting", 20)
        page.wait_for_selector("#job[data-state='pending']")
        text = page.locator("#job").text_content()
        assert "pending" in text and "waiting for a worker" in text
        assert page.locator("#job time").text_content() == "just now"
        assert page.locator("#log .band").count() == 0
        save_shot(page, "job-pending")
        with worker(database, queue):
            page.wait_for_selector("#job", state="hidden")
            page.wait_for_function("document.querySelectorAll('#log .band').length >= 1")
        page.wait_for_function("document.querySelectorAll('#prompt [data-fold]').length >= 1")
        assert server.get("/api/v1/sessions/waiting/views/default")["job"] is None


def test_a_parked_view_shows_why(page: Any, database: str) -> None:
    """The workers start without the plugin of the view's model: every job fails."""
    with fresh_queue() as queue, serving(database, queue) as server:
        open_view(page, server, "poison", preset="rolling", budget=4000, model="slow:0.01")
        with worker(database, queue, max_failures=2, backoff=0.1, plugins=()):
            chat(server, "poison", 12)
            page.wait_for_selector("#job[data-state='parked']")
        text = page.locator("#job").text_content()
        assert "parked" in text and "2 failures in a row" in text
        assert "unknown model provider 'slow'" in page.locator("#job .job-reason").text_content()
        save_shot(page, "job-parked")
