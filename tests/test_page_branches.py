"""The page shows a session's branches in headless Chromium: a regenerated answer and an
edited question make branches, the page lists them, and switching shows that branch's
log and prompt; a session without branches shows no picker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from page_server import Server, need_browser, opened_page, running

API = "/api/v1/sessions/tree"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    need_browser()
    with running(tmp_path_factory.mktemp("page-branches"), auth=False) as srv:
        srv.seed(
            "tree",
            [
                {"role": "system", "content": "You plan trips."},
                {"role": "user", "content": "Where should I stay in Lisbon?"},
                {"role": "assistant", "content": "Stay in Chiado."},
            ],
        )
        srv.post(f"{API}/messages", {"messages": [
            {"role": "assistant", "content": "Stay in Alfama, near the castle."}], "parent": 2})  # fmt: skip
        srv.post(f"{API}/messages", {"messages": [
            {"role": "user", "content": "Where should I eat in Porto?"},
            {"role": "assistant", "content": "Try a francesinha."}], "parent": 1})  # fmt: skip
        srv.client.put(f"{API}/views/default", json={"budget": 100_000}).raise_for_status()
        srv.seed("line", [{"role": "user", "content": "one branch only"}])
        srv.client.put(
            "/api/v1/sessions/line/views/default", json={"budget": 100_000}
        ).raise_for_status()
        yield srv


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    yield from opened_page(browser)


def prompt_text(page: Any) -> str:
    page.wait_for_selector("#report[data-tokens]:not([data-tokens=''])")
    return str(page.locator("#prompt-section").inner_text())


def test_the_page_lists_branches_and_switches_between_them(page: Any, server: Server) -> None:
    page.goto(f"{server.url}/sessions/tree")
    page.wait_for_selector("#log [data-seq='6']")
    picker = page.locator("#branch-picker")
    assert picker.is_visible()
    labels = picker.locator("option").all_inner_texts()
    assert labels[0].startswith("Newest (ends at #6)")
    assert [label.split(":")[0] for label in labels[1:]] == [
        "Ends at #6",
        "Ends at #4",
        "Ends at #3",
    ]
    # The newest branch (the edited question) is the prompt; the whole log is shown, its
    # branch starts marked.
    assert "francesinha" in prompt_text(page) and "Chiado" not in prompt_text(page)
    assert page.locator("#log [data-seq]").count() == 6
    assert page.locator("#m4 .branch-mark").inner_text() == "Branch: after #2"
    # The regenerated answer's branch: its log and its prompt alone.
    picker.select_option("4")
    page.wait_for_function("document.querySelector('#m4') && !document.querySelector('#m3')")
    assert sorted(page.locator("#log [data-seq]").evaluate_all(
        "cards => cards.map(c => Number(c.dataset.seq))")) == [1, 2, 4]  # fmt: skip
    page.wait_for_function("document.querySelector('#prompt-section').innerText.includes('Alfama')")
    assert "francesinha" not in prompt_text(page)
    assert "branch=4" in page.url
    # Reloaded, the page opens on the branch it showed.
    page.reload()
    page.wait_for_function("document.querySelector('#prompt-section').innerText.includes('Alfama')")
    assert page.locator("#branch-picker").input_value() == "4"


def test_a_session_without_branches_shows_no_picker(page: Any, server: Server) -> None:
    page.goto(f"{server.url}/sessions/line")
    page.wait_for_selector("#log [data-seq='1']")
    prompt_text(page)
    assert not page.locator("#branch-picker").is_visible()
