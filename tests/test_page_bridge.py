"""The page shows provisional folds: in the prompt, labelled as such, and in its report,
while the view's own fold has not landed; the event stream tells it when one is made."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from page_server import Server, opened_page, running
from test_bridge import BUDGET, SYSTEM, loop

import contextfold.testing.models  # noqa: F401  (registers the slow:SECONDS model)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A tool loop in a view whose model takes 20 s a call (``slow:20``, the offline
    stand-in after a pause): its fold has not landed, and what render would cut stands
    provisionally."""
    with running(tmp_path_factory.mktemp("page-bridge"), auth=False) as srv:
        srv.seed("loop", [{"role": "system", "content": SYSTEM}, *loop(30)])
        srv.client.put(
            "/api/v1/sessions/loop/views/default",
            json={"preset": "rolling", "budget": BUDGET, "model": "slow:20"},
        ).raise_for_status()
        yield srv


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    yield from opened_page(browser)


def test_a_provisional_fold_is_shown_as_such(page: Any, server: Server) -> None:
    rendered = server.get(f"/api/v1/sessions/loop/views/default/render?budget={BUDGET}")
    provisional = rendered["report"]["provisional"]
    assert provisional and rendered["report"]["omitted"] == 0
    page.goto(f"{server.url}/sessions/loop?budget={BUDGET}")
    page.wait_for_selector("#prompt [data-provisional]")
    shown = page.locator("#prompt [data-provisional]").evaluate_all(
        "els => els.map(e => [e.dataset.provisional, e.textContent])"
    )
    assert shown
    for fold_id, text in shown:
        start, _, end = fold_id.split(":")[1].partition("-")
        assert fold_id.startswith("provisional:")
        assert f"provisional fold #{start}\u2013#{end}" in text
    assert "provisional fold" in page.locator("#report").text_content()
    assert page.locator("#prompt [data-fold]").count() == 0
