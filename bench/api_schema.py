"""Schemathesis against the served OpenAPI spec: cases run, and how many got a 5xx.

Every operation of ``/openapi.json`` (the event stream aside: it never ends) is
fuzzed with valid and invalid requests, with random path ids and with the
ids of a seeded session and view, all with a valid API key so requests get
past auth into the handlers. A 5xx is a bug: the figure to hold at zero.

    python bench/api_schema.py [--quick] [--json] [--examples N]
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from _common import parse_args, report

EXAMPLES = 40
QUICK_EXAMPLES = 8


@dataclass
class Fuzzed:
    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    unsatisfiable: int = 0

    @property
    def count_5xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


def seeded_app() -> tuple[Any, Any, str]:
    """An app over a fresh in-memory store, a key, and session ``s1`` with view ``default``."""
    import time as clock

    from contextfold.core.log import ApiKey
    from contextfold.server.app import create_app
    from contextfold.server.auth import hash_secret, new_key
    from contextfold.server.service import Service
    from contextfold.server.settings import Settings
    from contextfold.store.ram import RAMStore

    service = Service(Settings(runner=False), store=RAMStore())
    key_id, secret, key = new_key()
    service.store.put_api_key(ApiKey(key_id, "fuzz", hash_secret(secret), "", clock.time()))
    session = service.create("fuzz", "s1", system="You are terse.")
    for i in range(20):
        session.extend(
            [
                {"role": "user", "content": f"question {i} " + "word " * 40},
                {"role": "assistant", "content": f"answer {i} " + "word " * 60},
            ]
        )
    session.view("default", preset="offline", budget=1500)
    return create_app(service), service, key


def fuzz(app: Any, key: str, examples: int) -> Fuzzed:
    """Run ``examples`` cases per operation, mode and path choice; count the answers."""
    import schemathesis
    from hypothesis import HealthCheck, Verbosity, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex=r"/events$")
    found = Fuzzed()
    auth = {"Authorization": f"Bearer {key}"}
    known = {"sid": "s1", "name": "default"}
    operations = [result.ok() for result in schema.get_all_operations()]
    # Deleting the seeded session comes last, so the other operations find it.
    operations.sort(key=lambda op: op.method.upper() == "DELETE")
    for operation in operations:
        names = {p.name for p in operation.path_parameters}
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for fixed in ({}, {k: v for k, v in known.items() if k in names}):
                strategy = operation.as_strategy(mode, path_parameters=fixed or None)

                @settings(
                    max_examples=examples,
                    deadline=None,
                    database=None,
                    verbosity=Verbosity.quiet,
                    suppress_health_check=list(HealthCheck),
                )
                @given(case=strategy)
                def run(case: Any) -> None:
                    answer = case.call(headers=auth)
                    found.cases += 1
                    found.statuses[answer.status_code] += 1
                    if answer.status_code >= 500:
                        found.server_errors.append(
                            f"{case.method} {case.formatted_path} -> {answer.status_code}: "
                            f"{answer.text[:200]}"
                        )

                try:
                    run()
                except Unsatisfiable:  # nothing left to make invalid once the ids are fixed
                    found.unsatisfiable += 1
    return found


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--examples", type=int, help="cases per operation, mode and path")

    args = parse_args(__doc__ or "", options)
    examples = args.examples or (QUICK_EXAMPLES if args.quick else EXAMPLES)
    app, service, key = seeded_app()
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = fuzz(app, key, examples)
    service.close()
    for line in found.server_errors[:10]:
        print("5xx:", line)
    figures: dict[str, Any] = {
        "cases": found.cases,
        "server_errors_5xx": found.count_5xx,
        "statuses": dict(sorted(found.statuses.items())),
        "examples_per_operation_mode_path": examples,
        "seconds": time.perf_counter() - started,
    }
    report(figures, args.json)


if __name__ == "__main__":
    main()
