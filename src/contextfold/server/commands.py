"""``contextfold serve`` and ``contextfold keys``: the service's commands, added to the CLI.

Only argparse is imported at the top, so the CLI works without the server
extra; the commands name the extra when it is missing.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import socket
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.extras import needs_extra
from contextfold.llm.windows import check_windows, flag_windows
from contextfold.memory.session import Memory
from contextfold.options import configurable, named, resolve
from contextfold.redact import redact

if TYPE_CHECKING:
    from rich.console import Console

    from contextfold.server.service import Service
    from contextfold.server.settings import Settings

DEMO_TENANT = "local"
DEMO_SESSION = "demo"
DEMO_VIEW = "default"
DEMO_BUDGET = 12_000
DEMO_RESOURCE = "data/demo_session.json"
SHUTDOWN_S = 5
"""How long a stopping server waits for open requests (event streams never end on their own)."""


def add_commands(sub: Any) -> None:
    """Register ``serve`` and ``keys`` on the CLI's subparsers."""
    serve = sub.add_parser("serve", help="run the HTTP service (pip install 'contextfold[server]')")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    serve.add_argument(
        "--database",
        default="contextfold.db",
        help="store URL: a SQLite file (default contextfold.db), sqlite:///abs.db, "
        "postgresql://..., memory://",
    )
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="no API keys: every request is tenant 'local' (loopback addresses only)",
    )
    serve.add_argument(
        "--upstream",
        action="append",
        default=[],
        help="the proxy's model server, e.g. openai-compatible:http://127.0.0.1:8080/v1 "
        "(chat completions, responses) or anthropic:https://api.anthropic.com/v1 (messages); "
        "repeat it for one of each",
    )
    serve.add_argument(
        "--upstream-key-env",
        default="CONTEXTFOLD_UPSTREAM_KEY",
        metavar="NAME",
        help="environment variable holding the OpenAI-compatible upstream's API key",
    )
    serve.add_argument(
        "--anthropic-key-env",
        default="ANTHROPIC_API_KEY",
        metavar="NAME",
        help="environment variable holding the Anthropic upstream's API key",
    )
    serve.add_argument(
        "--model",
        metavar="SPEC",
        help="summarizer of the views the proxy creates: openai:MODEL, anthropic:MODEL, "
        "openai-compatible:URL#MODEL (default: none, the offline stand-in)",
    )
    serve.add_argument(
        "--preset",
        help="preset of the views the proxy creates (default offline; with --model, task-state "
        "for agent traffic, chat for the rest)",
    )
    serve.add_argument(
        "--budget",
        type=int,
        metavar="N",
        help="fixed budget of the views the proxy creates (default: the request model's "
        "context window less room for the answer; 8000 for a model not in the table)",
    )
    serve.add_argument(
        "--model-window",
        action="append",
        default=[],
        metavar="NAME=TOKENS",
        help="a model's context window, over the built-in table and [model_windows] "
        "(repeatable; a name ending in * covers every model starting with it)",
    )
    serve.add_argument(
        "--recall-tools",
        action="store_true",
        help="offer the recall tools (search, expand, folds) to the upstream model of a "
        "session with folds, and answer their calls here (a request's "
        "X-Contextfold-Recall-Tools: on|off overrides it)",
    )
    serve.add_argument(
        "--recall-rounds",
        type=int,
        default=3,
        metavar="N",
        help="the most recall rounds answered in one proxied call (default 3)",
    )
    serve.add_argument(
        "--no-cache-breakpoints",
        action="store_true",
        help="send Anthropic Messages prompts without the cache_control breakpoints the proxy "
        "sets where the prompt is stable (it sets them only when the client set none)",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser requests from ORIGIN (repeatable; CORS is off by default)",
    )
    serve.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="server processes sharing the port, each with its own runner (default 1); "
        "a SQLite file or PostgreSQL, not memory://",
    )
    serve.add_argument(
        "--no-runner",
        action="store_true",
        help="no background compaction here (other processes run it); compact stays available",
    )
    serve.add_argument(
        "--runner-processes",
        type=int,
        default=1,
        metavar="N",
        help="worker processes for model-free folding, off the requests' GIL (0: fold on threads)",
    )
    serve.add_argument(
        "--workers",
        metavar="REDIS_URL",
        help="send compaction jobs to 'contextfold worker' processes through this Redis "
        "(redis://host:6379/0; pip install 'contextfold[workers]') instead of compacting here",
    )
    serve.add_argument(
        "--queue",
        default="contextfold",
        metavar="NAME",
        help="the workers' queue (default contextfold; the workers' --queue)",
    )
    serve.add_argument(
        "--demo",
        action="store_true",
        help="seed the demo session (tenant 'local', no auth) and print the page's address",
    )
    serve.set_defaults(command=_serve)
    configurable(serve, "serve")

    keys = sub.add_parser("keys", help="create, list and revoke the service's API keys")
    keys_sub = keys.add_subparsers(required=True, metavar="ACTION")
    create = keys_sub.add_parser("create", help="make a key for a tenant; printed once")
    create.add_argument("--tenant", required=True, help="a-z 0-9 _ -, up to 64")
    create.add_argument("--label", default="", help="a note to recognize the key by")
    create.add_argument("--database", default="contextfold.db", help="the service's store URL")
    create.set_defaults(command=_keys_create)
    listing = keys_sub.add_parser("list", help="the keys (never their secrets)")
    listing.add_argument("--tenant", help="only this tenant's")
    listing.add_argument("--database", default="contextfold.db", help="the service's store URL")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(command=_keys_list)
    revoke = keys_sub.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id", help="the key's id (the 12 hex digits after cf_)")
    revoke.add_argument("--database", default="contextfold.db", help="the service's store URL")
    revoke.set_defaults(command=_keys_revoke)


def _serve(args: argparse.Namespace, out: Console, err: Console) -> None:
    with needs_extra("'contextfold serve'", "server"):
        from contextfold.server.processes import Supervisor, bind
        from contextfold.server.service import Service
        from contextfold.server.settings import Settings
    tables = resolve(args)
    if args.workers is not None:
        with needs_extra("'contextfold serve --workers'", "workers"):
            import contextfold.server.jobs  # noqa: F401
    try:
        settings = Settings(
            database=args.database,
            host=args.host,
            port=args.port,
            auth=not (args.no_auth or args.demo),
            upstream=tuple(args.upstream),
            upstream_key_env=args.upstream_key_env,
            anthropic_key_env=args.anthropic_key_env,
            model=args.model,
            preset=args.preset,
            budget=args.budget,
            model_windows={
                **check_windows(tables.get("model_windows", {}), f"{args.config} [model_windows]"),
                **flag_windows(args.model_window),
            },
            recall_tools=args.recall_tools,
            recall_rounds=args.recall_rounds,
            cache_breakpoints=not args.no_cache_breakpoints,
            cors_origins=tuple(args.cors_origin),
            demo=args.demo,
            runner=not args.no_runner,
            runner_processes=args.runner_processes,
            workers=args.workers,
            queue=args.queue,
            processes=args.processes,
        )
    except InvalidInput as exc:
        raise named(exc, args) from None
    service = None if settings.processes > 1 else Service(settings)
    if args.demo:
        seeding = service or Service(settings)  # several processes: seeded before the fork
        seed_demo(seeding)
        if seeding is not service:
            seeding.close()
    sock = bind(settings.host, settings.port)
    port = sock.getsockname()[1]
    base = f"http://{_url_host(args.host)}:{port}"
    say = partial(out.print, soft_wrap=True)  # whole lines: a URL is never cut
    say(redact(f"contextfold serving {args.database} on {base}  (API docs: {base}/docs)"))
    if not settings.auth:
        say("no auth: every request is tenant 'local'")
    if settings.upstreams:
        to = " and ".join(args.upstream)
        say(redact(f"proxy: {base}/v1 to {to}; {proxy_views(settings)}"))
    if settings.workers is not None:
        say(
            redact(
                f"compaction jobs go to the workers of queue {settings.queue!r} at {settings.workers}"
            )
        )
    if args.demo:
        say(f"demo session {DEMO_SESSION!r}: open {base}/sessions/{DEMO_SESSION}")
    if settings.processes > 1:
        say(f"{settings.processes} server processes share the port")
        Supervisor(settings.processes, sock, partial(_serve_on, settings), err.print).run()
        return
    _serve_on(settings, sock, service)


def _serve_on(settings: Settings, sock: socket.socket, service: Service | None = None) -> None:
    """One server process: its own service over the store (``service``, or one made here),
    on the listening socket."""
    from contextfold.server.app import create_app
    from contextfold.server.lifecycle import run_until_stopped
    from contextfold.server.service import Service

    if service is None:
        service = Service(settings)
    run_until_stopped(
        service,
        create_app(service),
        sockets=[sock],
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_S,
        loop=_best("uvloop", "auto"),
        http=_best("httptools", "auto"),
    )


def proxy_views(settings: Settings) -> str:
    """What the views the proxy creates fold with, for the banner."""
    model = settings.model or "none (the offline stand-in)"
    budget = (
        f"budget {settings.budget}"
        if settings.budget is not None
        else "budget: the window of the request's model less room for the answer"
    )
    presets = (
        settings.view_preset(agent=False)
        if settings.view_preset(agent=False) == settings.view_preset(agent=True)
        else f"{settings.view_preset(agent=False)} (agents: {settings.view_preset(agent=True)})"
    )
    return f"views: preset {presets}, model {model}, {budget}"


def _best(module: str, fallback: str) -> Any:
    """``module`` if installed (uvicorn's faster loop and parser), else uvicorn's pick."""
    try:
        importlib.import_module(module)
    except ImportError:
        return fallback
    return module


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def seed_demo(service: Service) -> None:
    """The packaged demo session under tenant ``local``, with its view; kept if already there."""
    text = importlib.resources.files("contextfold").joinpath(DEMO_RESOURCE).read_text("utf-8")
    messages = json.loads(text)
    try:
        session = service.session(DEMO_TENANT, DEMO_SESSION)
    except NotFound:
        session = service.create(DEMO_TENANT, DEMO_SESSION, meta={"demo": True})
        session.extend(messages, keys=[f"demo:{i}" for i in range(len(messages))])
    view = session.view(DEMO_VIEW, preset="offline", budget=DEMO_BUDGET)
    if not view.folds():  # so the page opens on a folded view
        view.compact()


def _keys_memory(database: str) -> Memory:
    """The service's memory for the keys commands: they count no tokens, so no encoding
    is loaded."""
    return Memory(database, encoding="approx")


def _keys_create(args: argparse.Namespace, out: Console, err: Console) -> None:
    from contextfold.server.ids import check_tenant
    from contextfold.server.keys import create_key

    tenant = check_tenant(args.tenant)
    with _keys_memory(args.database) as memory:
        key = create_key(memory, tenant, args.label)
    key_id = key.split("_", 2)[1]  # cf_<id>_<secret>
    err.print(f"key {key_id} for tenant {tenant!r} (shown once; the store keeps only its hash):")
    out.print(key, soft_wrap=True, highlight=False)


def _keys_list(args: argparse.Namespace, out: Console, err: Console) -> None:
    from rich.table import Table

    with _keys_memory(args.database) as memory:
        keys = memory.api_keys.listing(args.tenant)
    if args.json:
        rows = [
            {
                "id": k.id,
                "tenant": k.tenant,
                "label": k.label,
                "created_at": k.created_at,
                "revoked_at": k.revoked_at,
            }
            for k in keys
        ]
        out.print_json(data=rows)
        return
    table = Table(title="API keys")
    for column in ("id", "tenant", "label", "created", "revoked"):
        table.add_column(column)
    for k in keys:
        table.add_row(k.id, k.tenant, k.label, _when(k.created_at), _when(k.revoked_at))
    out.print(table)


def _keys_revoke(args: argparse.Namespace, out: Console, err: Console) -> None:
    with _keys_memory(args.database) as memory:
        revoked = memory.api_keys.revoke(args.id)
    if not revoked:
        raise NotFound(f"no key {args.id!r} to revoke (see 'contextfold keys list')")
    out.print(f"key {args.id} revoked")


def _when(at: float | None) -> str:
    return "" if not at else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
