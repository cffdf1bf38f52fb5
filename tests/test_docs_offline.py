"""``/docs`` works with no internet: Swagger UI and its files come from the app, keyless.

A real server with API keys on; the HTML is read as a browser reads it, every
file it names is fetched without a key, and headless Chromium renders the page
with every request to another host than 127.0.0.1 aborted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from page_server import Server, running

MIN_OPERATIONS = 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("docs"), auth=True) as srv:
        yield srv


def referenced(html: str) -> list[str]:
    """Every URL the page names: src and href attributes, and Swagger UI's ``url:``."""
    found = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    found += re.findall(r"""\burl\s*:\s*["']([^"']+)["']""", html)
    return found


def test_the_docs_page_names_no_other_host(server: Server) -> None:
    response = httpx.get(f"{server.url}/docs")
    assert response.status_code == 200
    urls = referenced(response.text)
    assert len(urls) >= 4, urls  # the CSS, the favicon, the bundle, the spec
    for url in urls:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc, f"{url} is on another host"
    assert not re.search(r"https?:|//\w", response.text), "an absolute URL in the page"


def test_every_file_the_docs_page_names_is_served_without_a_key(server: Server) -> None:
    urls = referenced(httpx.get(f"{server.url}/docs").text)
    for url in urls:
        response = httpx.get(f"{server.url}{url}")
        assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:200]}"
        assert response.content
    # The API itself still wants a key.
    assert httpx.get(f"{server.url}/api/v1/sessions").status_code == 401


def test_a_docs_file_not_shipped_is_404(server: Server) -> None:
    response = httpx.get(f"{server.url}/docs/assets/..%2Fpage.css")
    assert response.status_code == 404
    assert httpx.get(f"{server.url}/redoc").status_code == 404


def test_the_docs_render_the_operations_with_other_hosts_cut_off(
    server: Server, browser: Any, tmp_path: Path
) -> None:
    context = browser.new_context()
    context.set_default_timeout(20_000)
    aborted: list[str] = []
    errors: list[str] = []

    def only_here(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            aborted.append(route.request.url)
            route.abort()

    context.route("**/*", only_here)
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(f"{server.url}/docs")
        page.wait_for_selector(".opblock")
        operations = page.locator(".opblock").count()
        title = page.locator(".info .title").inner_text()
    finally:
        context.close()
    assert operations > MIN_OPERATIONS
    assert title.startswith("contextfold")
    assert not aborted, f"the page asked other hosts: {aborted}"
    assert not errors, f"script errors on the page: {errors}"
