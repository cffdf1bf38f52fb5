"""The page with keys required: it asks for a key once and keeps it, and a key of
tenant B sees nothing of tenant A's sessions (list, search, session page, history,
prompt, folds, event stream), while A's own key sees them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from page_server import Server, need_browser, running

SECRET = "the launch code is 7781-ALPHA"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, str]]:
    need_browser()
    with running(tmp_path_factory.mktemp("page-auth"), auth=True) as srv:
        key_a, key_b = srv.add_key("acme"), srv.add_key("globex")
        srv.seed(
            "secret-plan",
            [{"role": "user", "content": SECRET}, {"role": "assistant", "content": "noted"}],
            key=key_a,
        )
        put = srv.client.put(
            "/api/v1/sessions/secret-plan/views/default",
            json={"preset": "offline", "budget": 4000},
            headers={"Authorization": f"Bearer {key_a}"},
        )
        assert put.status_code == 200, put.text
        srv.seed("globex-notes", [{"role": "user", "content": "globex only"}], key=key_b)
        yield srv, key_a, key_b


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    opened = browser.new_context(bypass_csp=True)
    opened.set_default_timeout(10_000)
    yield opened
    opened.close()


def give_key(page: Any, key: str) -> None:
    page.wait_for_selector("#key-dialog[open]")
    page.fill("#key-input", key)
    page.click("#key-form button[type=submit]")


def ids(page: Any) -> list[str]:
    found: list[str] = page.locator(".session-row").evaluate_all("r => r.map(x => x.dataset.id)")
    return found


def test_page_asks_for_a_key_once_and_keeps_it(
    context: Any, keyed: tuple[Server, str, str]
) -> None:
    server, key_a, _ = keyed
    page = context.new_page()
    page.goto(server.url + "/")
    give_key(page, "cf_000000000000_" + "x" * 32)  # not a key of this server
    page.wait_for_selector("#key-dialog[open]")
    assert "refused" in page.locator("#key-reason").text_content()
    give_key(page, key_a)
    page.wait_for_selector(".session-row")
    assert ids(page) == ["secret-plan"]
    assert page.evaluate("localStorage.getItem('contextfold.apiKey')") == key_a
    assert page.locator("#forget-key").is_visible()
    page.goto(server.url + "/sessions/secret-plan")  # no second question
    page.wait_for_selector("#report[data-tokens]:not([data-tokens=''])")
    assert page.locator("#key-dialog[open]").count() == 0
    assert SECRET in page.locator("#log").text_content()
    page.wait_for_selector("#live[data-state='live']")  # the stream takes the key as ?api_key=
    page.click("#forget-key")
    page.wait_for_selector("#key-dialog[open]")
    assert page.evaluate("localStorage.getItem('contextfold.apiKey')") is None


def test_another_tenant_sees_nothing(context: Any, keyed: tuple[Server, str, str]) -> None:
    server, _, key_b = keyed
    context.add_init_script(f"localStorage.setItem('contextfold.apiKey', {key_b!r})")
    page = context.new_page()
    seen: list[str] = []
    page.on("response", lambda r: seen.append(f"{r.status} {r.url}"))
    page.goto(server.url + "/")
    page.wait_for_selector(".session-row")
    assert ids(page) == ["globex-notes"]
    page.fill("#search", "secret")
    page.wait_for_selector("text=No session id contains")
    assert ids(page) == []

    page.goto(server.url + "/sessions/secret-plan")
    page.wait_for_selector("text=No session “secret-plan” here.")
    assert SECRET not in page.content()
    assert page.locator("#log .msg").count() == 0
    assert any(re.fullmatch(r"404 .*/api/v1/sessions/secret-plan", s) for s in seen)

    # What the page's scripts could ask for with B's key, A's session: all 404, nothing shown.
    statuses = page.evaluate(
        """async (key) => {
            const base = '/api/v1/sessions/secret-plan';
            const paths = ['', '/messages', '/views', '/views/default/render?budget=4000',
                           '/views/default/folds?superseded=true', '/events?api_key=' + key];
            const out = [];
            for (const path of paths) {
                const r = await fetch(base + path, {headers: {Authorization: 'Bearer ' + key}});
                const body = await r.text();
                out.push([r.status, body.includes('7781')]);
            }
            return out;
        }""",
        key_b,
    )
    assert statuses == [[404, False]] * 6
