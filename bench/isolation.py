"""Tenant isolation: cross-tenant attempts on every route and method, and how many leaked.

The walk of ``contextfold.testing.isolation`` (the one the service's tests
assert on) over the app ``contextfold serve`` builds, on RAM, SQLite and, when
reachable, PostgreSQL: tenant B's key, no key, a forged key and the event
stream's ``?api_key=`` tried on tenant A's session. Figures: attempts, leaks
(A's marker in any answer), answers with an unexpected status, routes the
table does not cover, and whether A's state stayed the same.

    python bench/isolation.py [--quick] [--json]
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from _common import parse_args, report
from fastapi.testclient import TestClient

from contextfold.core.errors import StoreError
from contextfold.server.app import create_app
from contextfold.server.service import Service
from contextfold.server.settings import Settings
from contextfold.store.registry import open_store
from contextfold.testing.isolation import cross_tenant

PG = os.environ.get("CONTEXTFOLD_PG", "postgresql://postgres@127.0.0.1:5432/test")


def walk(url: str) -> dict[str, Any]:
    store = open_store(url)
    service = Service(Settings(runner=False, key_cache_s=0), store=store)
    try:
        with TestClient(create_app(service)) as client:
            found = cross_tenant(client, service.memory)
    finally:
        service.close()
    return {
        "attempts": found.attempts,
        "leaks": len(found.leaks),
        "wrong_status": len(found.wrong),
        "uncovered_routes": len(found.uncovered),
        "a_unchanged": found.a_unchanged,
        "b_lists_only_own": found.b_lists_only_own,
    }


def drop(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    args = parse_args(__doc__)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"ram": "memory://", "sqlite": str(Path(tmp) / "isolation.db")}
        schema = f"bench_iso_{uuid.uuid4().hex[:8]}"
        try:
            open_store(f"{PG}?schema={schema}").close()
            urls["postgresql"] = f"{PG}?schema={schema}"
        except StoreError as exc:
            if os.environ.get("CI") == "true":
                raise
            print(f"PostgreSQL unreachable, measured without it: {exc}")
        try:
            for name, url in urls.items():
                for figure, value in walk(url).items():
                    figures[f"{name}_{figure}"] = value
        finally:
            if "postgresql" in urls:
                drop(schema)
    figures["attempts"] = sum(v for k, v in figures.items() if k.endswith("_attempts"))
    figures["leaks"] = sum(v for k, v in figures.items() if k.endswith("_leaks"))
    report(figures, args.json)


if __name__ == "__main__":
    main()
