"""The page's files as the app serves them, no browser needed: the shell at both
paths, only shipped files, the right types, and headers that keep the page to its
own origin and the key out of referrers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.resources import files

import pytest
from fastapi.testclient import TestClient

from contextfold.server.app import create_app
from contextfold.server.settings import Settings

STATIC = files("contextfold.server").joinpath("static")


@pytest.fixture(scope="module", params=[False, True], ids=["no-auth", "auth"])
def client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    folder = tmp_path_factory.mktemp("files")
    app = create_app(Settings(database=str(folder / "files.db"), auth=request.param))
    with TestClient(app, base_url="http://127.0.0.1") as test_client:
        yield test_client


def test_shell_at_both_paths_without_a_key(client: TestClient) -> None:
    """The shell needs no key (it asks for one); the data behind it does."""
    home = client.get("/")
    session = client.get("/sessions/some-session")
    assert home.status_code == session.status_code == 200
    assert home.text == session.text
    assert home.headers["content-type"] == "text/html; charset=utf-8"
    policy = home.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert home.headers["referrer-policy"] == "no-referrer"
    assert home.headers["x-content-type-options"] == "nosniff"


def test_every_file_the_page_names_is_served(client: TestClient) -> None:
    shell = client.get("/").text
    named = set(re.findall(r'(?:src|href)="/static/([^"]+)"', shell))
    scripts = [n for n in named if n.endswith(".js")]
    while scripts:  # and every module those import, transitively
        imported = set(re.findall(r'from "\./([^"]+)"', STATIC.joinpath(scripts.pop()).read_text()))
        scripts += sorted(imported - named)
        named |= imported
    assert {"app.js", "page.css", "api.js", "session.js", "history.js", "prompt.js"} <= named
    types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    for name in sorted(named):
        response = client.get(f"/static/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith(types[name[name.rfind(".") :]])
        assert response.content == STATIC.joinpath(name).read_bytes()


@pytest.mark.parametrize("name", ["nope.js", "..%2Fpage.py", "%2E%2E%2Fapp.py", "page.py"])
def test_only_shipped_files(client: TestClient, name: str) -> None:
    response = client.get(f"/static/{name}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_page_routes_stay_out_of_the_api_spec(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith(("/static", "/sessions"))]
