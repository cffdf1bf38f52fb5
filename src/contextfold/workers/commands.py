"""``contextfold worker``: a Celery worker running compaction jobs, added to the CLI.

Only argparse is imported at the top, so the CLI works without the workers
extra; the command names the extra when it is missing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import socket
from typing import TYPE_CHECKING, Any

from contextfold.core.errors import InvalidInput
from contextfold.core.extras import needs_extra
from contextfold.options import configurable, named, resolve
from contextfold.redact import redact

if TYPE_CHECKING:
    from rich.console import Console

POOLS = ("prefork", "threads", "solo")


def add_worker_command(sub: Any) -> None:
    worker = sub.add_parser(
        "worker",
        help="run compaction jobs from a Redis broker (pip install 'contextfold[workers]')",
    )
    worker.add_argument("--database", required=True, help="the store URL, e.g. postgresql://...")
    worker.add_argument(
        "--broker", required=True, help="the Redis broker, e.g. redis://127.0.0.1:6379/0"
    )
    worker.add_argument(
        "--queue", default="contextfold", help="the queue's name (default contextfold)"
    )
    worker.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="jobs run at once (default 1)"
    )
    worker.add_argument(
        "--pool",
        choices=POOLS,
        default="prefork",
        help="Celery's pool: processes (default), threads, or solo",
    )
    worker.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it may register model providers and strategies); repeatable",
    )
    worker.add_argument(
        "--lease-ttl",
        type=float,
        default=60.0,
        metavar="S",
        help="a dead worker's lease expires after S seconds (default 60)",
    )
    worker.add_argument(
        "--max-failures",
        type=int,
        default=5,
        metavar="N",
        help="failures in a row before a view is parked (default 5)",
    )
    worker.add_argument(
        "--backoff",
        type=float,
        default=1.0,
        metavar="S",
        help="pause after the first failure, doubled after each (default 1)",
    )
    worker.add_argument(
        "--visibility-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="a job a dead worker held goes to another after S seconds (default 600; longer than any job)",
    )
    worker.add_argument(
        "--loglevel", default="warning", help="Celery's log level (default warning)"
    )
    worker.set_defaults(command=_worker)
    configurable(worker, "worker")


def _worker(args: argparse.Namespace, out: Console, err: Console) -> None:
    with needs_extra("'contextfold worker'", "workers"):
        from contextfold.workers.app import celery_app
        from contextfold.workers.task import WorkerSettings, register
    resolve(args)
    for name, value in (("concurrency", args.concurrency), ("max_failures", args.max_failures)):
        if value < 1:
            raise named(InvalidInput(f"{name} must be at least 1", field=name), args)
    for name, seconds in (
        ("lease_ttl", args.lease_ttl),
        ("backoff", args.backoff),
        ("visibility_timeout", args.visibility_timeout),
    ):
        if seconds <= 0:
            raise named(InvalidInput(f"{name} must be positive", field=name), args)
    for module in args.plugin:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise InvalidInput(f"cannot import plugin {module!r}: {exc}", field="plugin") from exc
    settings = WorkerSettings(
        database=args.database,
        queue=args.queue,
        lease_ttl_s=args.lease_ttl,
        max_failures=args.max_failures,
        backoff_s=args.backoff,
        visibility_timeout_s=args.visibility_timeout,
    )
    try:
        app = celery_app(args.broker, args.queue, visibility_timeout_s=args.visibility_timeout)
    except InvalidInput as exc:
        raise named(exc, args) from None
    register(app, settings)
    out.print(
        redact(f"contextfold worker: {args.database} jobs from {args.broker} queue {args.queue!r}"),
        soft_wrap=True,
    )
    app.worker_main(
        [
            "worker",
            f"--queues={args.queue}",
            f"--concurrency={args.concurrency}",
            f"--pool={args.pool}",
            f"--loglevel={args.loglevel}",
            f"--hostname=contextfold-{os.getpid()}@{socket.gethostname()}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )
