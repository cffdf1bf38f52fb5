"""The page's figures and words in headless Chromium: what a fold saved is measured
against the log range it covers, labels use the project's words, the budget slider
stops at the view's floor, a refusal is said in plain words, and the key dialog says
how to get a key."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from page_server import (
    LAPTOP,
    Server,
    demo_messages,
    need_browser,
    opened_page,
    running,
    save_shot,
)

DEMO = "/api/v1/sessions/demo"
CHAT = "/api/v1/sessions/chat"
# Words the page used for what the project calls otherwise.
NOT_OUR_WORDS = re.compile(r"whole history|omitted|\bseq\b|\btok\b|\(field ", re.IGNORECASE)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An open server with the demo session folded as ``serve --demo`` folds it (a summary
    over masked tool results), and a short chat with a system prompt."""
    need_browser()
    with running(tmp_path_factory.mktemp("page-figures"), auth=False) as srv:
        srv.seed("demo", demo_messages())
        put = {"preset": "offline", "budget": 12_000}
        srv.client.put(f"{DEMO}/views/default", json=put).raise_for_status()
        srv.post(f"{DEMO}/views/default/compact", {})
        srv.seed(
            "chat",
            [
                {"role": "system", "content": "You answer questions about caches."},
                {"role": "user", "content": "What is a TTL cache?"},
                {"role": "assistant", "content": "A cache whose entries expire after a time."},
            ],
        )
        put = {"preset": "offline", "budget": 100_000}  # nothing to fold: the runner waits
        srv.client.put(f"{CHAT}/views/default", json=put).raise_for_status()
        yield srv


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    yield from opened_page(browser)


def open_session(page: Any, server: Server, sid: str, query: str = "") -> None:
    page.goto(f"{server.url}/sessions/{sid}{query}")
    page.wait_for_selector("#report[data-tokens]:not([data-tokens=''])")


def own_words(page: Any) -> str:
    """The page's own text, dialogs included: all but what the log and the folds hold."""
    text: str = page.evaluate(
        """() => { const copy = document.body.cloneNode(true);
        for (const node of copy.querySelectorAll('.content, .tool-call, #fold-text')) node.remove();
        return copy.textContent; }"""
    )
    return text


def test_a_fold_saved_what_its_log_range_held_less_its_own_tokens(
    page: Any, server: Server
) -> None:
    open_session(page, server, "demo")
    folds = server.get(f"{DEMO}/views/default/folds")["folds"]
    [summary] = [f for f in folds if f["kind"] == "summary"]
    # The summary folded over masked results: against them it saved much less.
    assert summary["log_tokens"] > summary["tokens_before"]
    for fold in folds:
        saved = fold["log_tokens"] - fold["tokens_after"]
        label = page.locator(f'#log .band[data-id="{fold["id"]}"] .band-label')
        assert f"{saved:,} tokens saved" in label.text_content()
        assert str(saved) == label.evaluate("b => b.parentElement.dataset.saved")
    page.locator(f'#log .band[data-id="{summary["id"]}"] .band-label').click()
    page.wait_for_selector("#fold-dialog[open]")
    facts = dict(
        zip(
            page.locator("#fold-facts dt").all_text_contents(),
            page.locator("#fold-facts dd").all_text_contents(),
            strict=True,
        )
    )
    assert facts["tokens in the log"] == f"{summary['log_tokens']:,}"
    assert facts["tokens in the fold"] == f"{summary['tokens_after']:,}"
    assert facts["saved"] == f"{summary['log_tokens'] - summary['tokens_after']:,} tokens saved"
    save_shot(page, "fold-dialog")


def test_labels_say_left_out_and_clipped_in_plain_words(page: Any, server: Server) -> None:
    open_session(page, server, "demo")
    assert server.get(f"{DEMO}/views/default/render")["report"]["whole"]
    report = page.locator("#report")
    assert "nothing left out or clipped" in report.text_content()
    assert page.locator("#history-title").text_content().startswith("Log ")
    assert page.locator("label.check").text_content().strip() == "Show superseded folds"
    assert not NOT_OUR_WORDS.search(own_words(page))

    page.locator("#budget").fill("2000")  # the summary fold no longer fits whole
    page.wait_for_function("document.querySelector('#report').dataset.budget === '2000'")
    cut = server.get(f"{DEMO}/views/default/render?budget=2000")["report"]
    assert (cut["whole"], cut["omitted"], cut["clipped"]) == (False, 0, [])
    assert "a fold clipped to fit" in report.text_content()
    assert "left out" not in report.text_content()

    page.locator("#budget").fill("400")  # the last-resort cut, and a clipped message
    page.wait_for_function("document.querySelector('#report').dataset.budget === '400'")
    cut = server.get(f"{DEMO}/views/default/render?budget=400")["report"]
    assert cut["omitted"] > 0 and cut["clipped"]
    text = report.text_content()
    assert f"{cut['omitted']:,} logged messages left out by the budget" in text
    assert "clipped to fit: " + ", ".join(f"#{s}" for s in cut["clipped"]) in text
    assert "nothing left out" not in text
    page.check("#show-superseded")
    page.wait_for_selector("#log .band.superseded")
    assert not NOT_OUR_WORDS.search(own_words(page))


def test_the_budget_slider_stops_at_the_views_floor(page: Any, server: Server) -> None:
    open_session(page, server, "chat", "?budget=5")  # a budget below the floor, by link
    floor = server.get(f"{CHAT}/views/default")["floor"]
    slider = page.locator("#budget")
    assert slider.get_attribute("min") == str(floor)
    assert page.locator("#report").get_attribute("data-budget") == str(floor)
    assert page.locator("#budget-floor").text_content() == f"at least {floor}"
    page.locator("#budget").fill("600")
    page.wait_for_function("document.querySelector('#report').dataset.budget === '600'")
    page.locator("#budget").fill("1")  # dragged to the far left
    page.wait_for_function(f"document.querySelector('#report').dataset.budget === '{floor}'")
    assert page.locator("#report .error").count() == 0

    # A longer question raises the floor: the slider follows, and says so in plain words.
    question = "Why does my TTL cache keep serving entries after they expired? " * 12
    server.post(f"{CHAT}/messages", {"messages": [{"role": "user", "content": question}]})
    risen = server.get(f"{CHAT}/views/default")["floor"]
    assert risen > floor
    page.wait_for_function(f"document.querySelector('#report').dataset.budget === '{risen}'")
    assert slider.get_attribute("min") == str(risen)
    assert "the smallest this view takes" in page.locator("#notice").text_content()
    assert page.locator("#report .error").count() == 0
    assert not NOT_OUR_WORDS.search(own_words(page))


def test_a_refused_setting_is_said_in_plain_words(page: Any, server: Server) -> None:
    page.goto(server.url + "/?q=" + "x" * 200)  # longer than a search may be
    page.wait_for_selector("#list-status .error")
    said = page.locator("#list-status .error").text_content()
    assert said == "The search was refused: it should have at most 128 characters."


def test_a_damaged_fold_set_aside_is_said_in_plain_words(page: Any, server: Server) -> None:
    base = "/api/v1/sessions/mended"
    server.seed("mended", demo_messages())
    put = {"preset": "offline", "budget": 100_000}  # nothing to fold: the runner waits
    server.client.put(f"{base}/views/default", json=put).raise_for_status()
    server.post(f"{base}/views/default/compact?budget=12000", {})
    [summary] = server.get(f"{base}/views/default/folds")["folds"]
    open_session(page, server, "mended")
    page.wait_for_selector("#live[data-state='live']")
    page.wait_for_selector(f'#log .band[data-id="{summary["id"]}"]')
    with sqlite3.connect(server.service.settings.database) as raw:  # a careless hand
        # Its row moved: a fold already read is kept, but not one its row disagrees with.
        edited = "UPDATE folds SET end_seq = end_seq - 1 WHERE id = ?"
        raw.execute(edited, (summary["id"],))
    assert server.get(f"{base}/views/default/folds")["folds"] == []  # read: set aside
    page.wait_for_selector("#notice:not([hidden])")
    said = page.locator("#notice").text_content()
    assert said.startswith(
        "A damaged fold was set aside; the view renders its log range instead. "
        f"Fold {summary['id']} is kept out of the view"
    )
    page.wait_for_selector(f'#log .band[data-id="{summary["id"]}"]', state="detached")
    page.wait_for_function("document.querySelectorAll('#prompt [data-fold]').length === 0")


def test_the_key_dialog_says_how_to_get_a_key(browser: Any, tmp_path: Any) -> None:
    with running(tmp_path, auth=True) as server:
        context = browser.new_context(viewport=LAPTOP, bypass_csp=True)
        page = context.new_page()
        page.goto(server.url + "/")
        page.wait_for_selector("#key-dialog[open]")
        dialog = page.locator("#key-dialog")
        text = " ".join(dialog.inner_text().split())
        assert "This server needs an API key" in text
        assert "contextfold keys create --tenant NAME" in text
        assert "operator" in text
        assert "contextfold serve --no-auth asks for no key" in text
        assert "every request is tenant local" in text
        save_shot(page, "key-dialog")
        page.fill("#key-input", server.add_key("acme"))
        page.click("#key-form button[type=submit]")
        page.wait_for_selector("#list-status:text('No sessions yet.')")
        context.close()
