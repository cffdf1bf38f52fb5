"""The web page in headless Chromium against a real server: the sessions list and its
search and paging, one session's whole history beside its prompt, fold bands over
the ranges they cover, superseded folds on demand, the budget slider, live updates
from the event stream, a phone's width, escaping, and tenant isolation."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import load_rows
from page_server import (
    LAPTOP,
    Server,
    demo_messages,
    need_browser,
    opened_page,
    running,
    save_shot,
)

PHONE = {"width": 390, "height": 844}
CHATS = 52  # more than one page of the list (50)
HOSTILE = '<img src=x onerror="window.__owned=1"><script>window.__owned=2</script>'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An open (--no-auth) server with a coding agent's run, an airline agent's run,
    many small chats, and one session for live updates."""
    need_browser()
    with running(tmp_path_factory.mktemp("page"), auth=False) as srv:
        srv.seed("demo-refactor", demo_messages(), meta={"title": "Fix the TTL cache"})
        srv.client.put(
            "/api/v1/sessions/demo-refactor/views/default",
            json={"preset": "offline", "budget": 6000},
        ).raise_for_status()
        srv.post("/api/v1/sessions/demo-refactor/views/default/compact", {})
        srv.client.put(
            "/api/v1/sessions/demo-refactor/views/wide",
            json={"preset": "offline", "budget": 20000},
        ).raise_for_status()
        srv.post("/api/v1/sessions/demo-refactor/views/wide/compact", {})
        runs = load_rows("taubench_airline_dev", 2)
        airline = runs[0]["messages"]
        srv.seed("airline-0", airline, meta={"title": "airline agent"})
        srv.client.put(
            "/api/v1/sessions/airline-0/views/default", json={"preset": "offline", "budget": 2500}
        ).raise_for_status()
        srv.post("/api/v1/sessions/airline-0/views/default/compact", {})
        for n in range(CHATS):
            srv.post("/api/v1/sessions", {"id": f"chat-{n:03d}", "system": f"chat number {n}"})
        srv.seed("hostile", [{"role": "user", "content": HOSTILE}], meta={"title": HOSTILE})
        srv.seed("live-chat", runs[1]["messages"])
        srv.client.put(  # a budget nothing reaches: the runner leaves it alone
            "/api/v1/sessions/live-chat/views/default",
            json={"preset": "offline", "budget": 100_000},
        ).raise_for_status()
        yield srv


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    yield from opened_page(browser)


def list_ids(page: Any) -> list[str]:
    ids: list[str] = page.locator(".session-row").evaluate_all(
        "rows => rows.map(r => r.dataset.id)"
    )
    return ids


def open_session(page: Any, server: Server, sid: str) -> None:
    page.goto(f"{server.url}/sessions/{sid}")
    page.wait_for_selector("#report[data-tokens]:not([data-tokens=''])")


def load_whole_history(page: Any, last_seq: int) -> list[int]:
    """Scroll the log's end into sight until every message is loaded, a page at a time."""
    log = page.locator("#log .msg")
    while (shown := log.count()) < last_seq:
        page.locator("#load-more").scroll_into_view_if_needed()
        page.wait_for_function("n => document.querySelectorAll('#log .msg').length > n", arg=shown)
    seqs: list[int] = log.evaluate_all("cards => cards.map(c => Number(c.dataset.seq))")
    return seqs


def bands(page: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = page.locator("#log .band").evaluate_all(
        """els => els.map(b => ({start: +b.dataset.start, end: +b.dataset.end, kind: b.dataset.kind,
              strategy: b.dataset.strategy, superseded: b.dataset.superseded === 'true',
              label: b.querySelector('.band-label').textContent}))"""
    )
    return found


def test_list_shows_sessions_pages_and_search(page: Any, server: Server) -> None:
    every = [s["id"] for s in server.get("/api/v1/sessions?limit=500")["sessions"]]
    page.goto(server.url + "/")
    page.wait_for_selector(".session-row")
    assert list_ids(page) == every[:50]
    page.click("#next-page")
    page.wait_for_function(
        "document.querySelector('#list-status').textContent.startsWith('Page 2')"
    )
    assert list_ids(page) == every[50:]
    demo = server.get("/api/v1/sessions/demo-refactor")
    row = page.locator('.session-row[data-id="demo-refactor"]')
    assert row.locator(".stat").nth(0).text_content() == str(demo["messages"]) == "215"
    assert row.locator(".stat").nth(1).text_content() == f"{demo['tokens']:,}"
    assert "Fix the TTL cache" in row.text_content()
    page.click("#prev-page")
    page.wait_for_function(
        "document.querySelector('#list-status').textContent.startsWith('Page 1')"
    )
    assert list_ids(page) == every[:50]
    page.fill("#search", "REFACT")
    page.wait_for_function("document.querySelectorAll('.session-row').length === 1")
    assert list_ids(page) == ["demo-refactor"]
    assert page.url.endswith("/?q=REFACT")
    page.reload()
    page.wait_for_selector(".session-row")
    assert list_ids(page) == ["demo-refactor"]
    page.fill("#search", "no-such-session")
    page.wait_for_selector("text=No session id contains")
    assert list_ids(page) == []
    page.click(".brand")
    page.wait_for_selector(".session-row")
    page.click('.session-row[data-id="airline-0"] a')
    page.wait_for_url(re.compile(r"/sessions/airline-0$"))


def test_session_shows_whole_history_prompt_and_fold_bands(page: Any, server: Server) -> None:
    base = "/api/v1/sessions/demo-refactor"
    open_session(page, server, "demo-refactor")
    last_seq = server.get(base)["last_seq"]
    assert load_whole_history(page, last_seq) == list(range(1, last_seq + 1))
    assert page.locator("#history-count").text_content() == f"{last_seq} messages"

    rendered = server.get(base + "/views/default/render?budget=6000")
    assert page.locator("#report").get_attribute("data-tokens") == str(rendered["report"]["tokens"])
    assert page.locator("#prompt > li").count() == len(rendered["messages"])
    folded = page.locator("#prompt [data-fold]")
    assert folded.count() >= 1  # the summary fold, labelled in the prompt

    active = server.get(base + "/views/default/folds")["folds"]
    assert active
    drawn = bands(page)
    assert sorted((b["start"], b["end"], b["kind"]) for b in drawn) == sorted(
        (f["start"], f["end"], f["kind"]) for f in active
    )
    for fold in active:
        band = page.locator(f'#log .band[data-id="{fold["id"]}"]')
        label = band.locator(".band-label").text_content()
        assert fold["kind"] in label and fold["strategy"] in label
        assert f"{fold['log_tokens'] - fold['tokens_after']:,} tokens saved" in label
        # Drawn over its range: from the top of its first message to the bottom of its last.
        box = band.bounding_box()
        first = page.locator(f'#log .msg[data-seq="{fold["start"]}"]').bounding_box()
        last = page.locator(f'#log .msg[data-seq="{fold["end"]}"]').bounding_box()
        assert abs(box["y"] - first["y"]) < 2
        assert abs(box["y"] + box["height"] - (last["y"] + last["height"])) < 2

    every = server.get(base + "/views/default/folds?superseded=true")["folds"]
    assert len(every) > len(active)
    page.check("#show-superseded")
    page.wait_for_function(f"document.querySelectorAll('#log .band').length === {len(every)}")
    drawn = bands(page)
    assert sum(b["superseded"] for b in drawn) == len(every) - len(active)
    assert sorted((b["start"], b["end"]) for b in drawn) == sorted(
        (f["start"], f["end"]) for f in every
    )
    page.locator("#log .band[data-superseded='true'] .band-label").first.click()
    page.wait_for_selector("#fold-dialog[open]")
    assert "superseded by" in page.locator("#fold-facts").text_content()
    page.keyboard.press("Escape")
    page.uncheck("#show-superseded")
    page.wait_for_function(f"document.querySelectorAll('#log .band').length === {len(active)}")


def test_budget_slider_renders_again(page: Any, server: Server) -> None:
    open_session(page, server, "demo-refactor")
    report = page.locator("#report")
    before = int(report.get_attribute("data-tokens"))
    page.locator("#budget").fill("1500")
    page.wait_for_function("document.querySelector('#report').dataset.budget === '1500'")
    after = int(report.get_attribute("data-tokens"))
    assert after < before
    rendered = server.get("/api/v1/sessions/demo-refactor/views/default/render?budget=1500")
    assert after == rendered["report"]["tokens"] <= 1500
    assert page.locator("#prompt > li").count() == len(rendered["messages"])
    assert "budget=1500" in page.url
    floor = server.get("/api/v1/sessions/demo-refactor/views/default")["floor"]
    page.locator("#budget").fill("200")  # below what the system prompt and the last user need
    page.wait_for_function(f"document.querySelector('#report').dataset.budget === '{floor}'")
    assert page.locator("#report .error").count() == 0


def test_appended_message_and_committed_folds_show_up_live(page: Any, server: Server) -> None:
    base = "/api/v1/sessions/live-chat"
    open_session(page, server, "live-chat")
    page.wait_for_selector("#live[data-state='live']")
    page.evaluate("window.__same_page = true")
    shown = page.locator("#log .msg").count()
    assert page.locator("#log .band").count() == 0
    appended = server.post(
        base + "/messages", {"messages": [{"role": "user", "content": "a live one, 4417"}]}
    )
    seq = appended["messages"][0]["seq"]
    assert seq == shown + 1
    page.wait_for_selector(f'#log .msg[data-seq="{seq}"]')
    assert "a live one, 4417" in page.locator(f'#log .msg[data-seq="{seq}"]').text_content()
    page.wait_for_function(
        "document.querySelector('#prompt').textContent.includes('a live one, 4417')"
    )
    assert page.locator("#history-count").text_content() == f"{seq} messages"

    server.post(base + "/views/default/compact?budget=1500", {})
    folds = server.get(base + "/views/default/folds")["folds"]
    assert folds
    page.wait_for_function(f"document.querySelectorAll('#log .band').length === {len(folds)}")
    assert sorted((b["start"], b["end"]) for b in bands(page)) == sorted(
        (f["start"], f["end"]) for f in folds
    )
    page.wait_for_function("document.querySelectorAll('#prompt [data-fold]').length >= 1")
    assert page.evaluate("window.__same_page") is True


def test_view_picker_shows_each_views_folds_and_prompt(page: Any, server: Server) -> None:
    base = "/api/v1/sessions/demo-refactor"
    open_session(page, server, "demo-refactor")
    options = page.locator("#view-picker option").evaluate_all("o => o.map(x => x.value)")
    assert options == ["default", "wide"]
    assert page.locator("#view-picker").input_value() == "default"
    page.select_option("#view-picker", "wide")
    page.wait_for_function("document.querySelector('#report').dataset.budget === '20000'")
    rendered = server.get(base + "/views/wide/render")
    assert page.locator("#report").get_attribute("data-tokens") == str(rendered["report"]["tokens"])
    folds = server.get(base + "/views/wide/folds")["folds"]
    page.wait_for_function(
        f"document.querySelectorAll('#log .band').length === {len([f for f in folds if f['start'] <= 200])}"
    )
    assert "view=wide" in page.url
    page.reload()
    page.wait_for_selector("#report[data-tokens]:not([data-tokens=''])")
    assert page.locator("#view-picker").input_value() == "wide"


def test_log_text_is_never_markup(page: Any, server: Server) -> None:
    page.goto(server.url + "/?q=hostile")
    page.wait_for_selector('.session-row[data-id="hostile"]')
    assert page.locator(".session-title").text_content() == HOSTILE
    open_session_history(page, server, "hostile")
    card = page.locator('#log .msg[data-seq="1"]')
    assert card.locator(".content").text_content() == HOSTILE
    assert page.locator("#app img, #app script").count() == 0
    assert "no view yet" in page.locator("#report").text_content()  # and nothing failed
    page.wait_for_timeout(200)
    assert page.evaluate("window.__owned") is None


def open_session_history(page: Any, server: Server, sid: str) -> None:
    page.goto(f"{server.url}/sessions/{sid}")
    page.wait_for_selector('#log .msg[data-seq="1"]')


def test_laptop_and_phone_fit_the_screen(browser: Any, server: Server) -> None:
    shots: list[Path] = []
    for name, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
        context = browser.new_context(viewport=viewport, bypass_csp=True)
        page = context.new_page()
        page.goto(server.url + "/")
        page.wait_for_selector(".session-row")
        assert no_sideways_scroll(page), f"the list scrolls sideways on a {name}"
        open_session(page, server, "airline-0")
        page.check("#show-superseded")
        page.wait_for_selector("#log .band")
        assert no_sideways_scroll(page), f"the session page scrolls sideways on a {name}"
        columns = page.evaluate(
            "[document.querySelector('#history').getBoundingClientRect(), "
            "document.querySelector('#prompt-section').getBoundingClientRect()].map(r => [r.x, r.y])"
        )
        if name == "laptop":
            assert columns[0][1] == columns[1][1] and columns[0][0] < columns[1][0]  # side by side
        else:
            assert columns[0][0] == columns[1][0] and columns[0][1] < columns[1][1]  # stacked
        page.uncheck("#show-superseded")
        page.wait_for_function("!document.querySelector('#log .band.superseded')")
        if name == "phone":
            page.evaluate("window.scrollTo(0, 0)")
            shots.append(save_shot(page, f"session-{name}"))
        # A fold's label in the prompt brings its range of the log into sight.
        tag = page.locator("#prompt .fold-tag").first
        fold_id = tag.evaluate("t => t.closest('[data-fold]').dataset.fold")
        tag.click()
        band = page.locator(f'#log .band[data-id="{fold_id}"]')
        assert "flash" in band.get_attribute("class")
        start = band.get_attribute("data-start")
        page.wait_for_function(
            "s => { const r = document.querySelector(`#m${s}`).getBoundingClientRect();"
            " return r.top >= 0 && r.top < innerHeight; }",
            arg=start,
        )
        if name == "laptop":
            shots.append(save_shot(page, f"session-{name}"))
        context.close()
    assert all(shot.stat().st_size > 10_000 for shot in shots)


def no_sideways_scroll(page: Any) -> bool:
    widths: list[int] = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    return widths[0] <= widths[1]
