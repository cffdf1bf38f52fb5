"""``contextfold mcp``: the recall tools for MCP clients, added to the CLI.

Only argparse is imported at the top, so the CLI works without the ``mcp``
extra; the command names the extra when it is missing.
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import TYPE_CHECKING, Any

from contextfold.core.errors import InvalidInput
from contextfold.core.extras import needs_extra
from contextfold.memory.session import Memory
from contextfold.options import positive_int
from contextfold.redact import redact

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_PORT = 8766
"""Beside ``serve``'s 8765, so both can run on one machine."""
DEFAULT_MAX_TOKENS = 2000


def add_mcp_command(sub: Any) -> None:
    """Register ``mcp`` on the CLI's subparsers."""
    mcp = sub.add_parser(
        "mcp",
        help="serve the recall tools to MCP clients over stdio or HTTP "
        "(pip install 'contextfold[mcp]')",
    )
    mcp.add_argument(
        "--store",
        "--database",
        dest="database",
        default="contextfold.db",
        help="store URL: a SQLite file (default contextfold.db), sqlite:///abs.db, "
        "postgresql://... (the service's --database)",
    )
    mcp.add_argument(
        "--tenant",
        help="stdio only: the tenant whose sessions the tools read (default the service's "
        "'local'); over HTTP the tenant is the API key's",
    )
    mcp.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP at /mcp (API keys required) instead of stdio",
    )
    mcp.add_argument("--host", default="127.0.0.1", help="with --http: address to bind")
    mcp.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"with --http: port (default {DEFAULT_PORT})"
    )
    mcp.add_argument(
        "--max-tokens",
        type=positive_int,
        default=DEFAULT_MAX_TOKENS,
        metavar="N",
        help=f"the most tokens one answer holds (default {DEFAULT_MAX_TOKENS})",
    )
    mcp.set_defaults(command=_mcp)


def _mcp(args: argparse.Namespace, out: Console, err: Console) -> None:
    with needs_extra("'contextfold mcp'", "mcp"):
        import anyio

        from contextfold.server.mcp_server import MCP_PATH, serve_http, serve_stdio
        from contextfold.server.settings import LOCAL_TENANT
    from contextfold.server.ids import check_tenant

    if args.http and args.tenant is not None:
        raise InvalidInput(
            "--tenant is for stdio: over HTTP the tenant is the one of each request's API key",
            field="tenant",
        )
    if not 0 <= args.port <= 65535:
        raise InvalidInput(f"port must be in 0..65535, not {args.port}", field="port")
    tenant = check_tenant(args.tenant if args.tenant is not None else LOCAL_TENANT)
    with Memory(args.database) as memory:
        if not args.http:  # stdout is the protocol's: nothing else may be printed there
            anyio.run(partial(serve_stdio, memory, tenant, max_tokens=args.max_tokens))
            return
        host = f"[{args.host}]" if ":" in args.host else args.host
        out.print(
            redact(f"contextfold mcp: {args.database} on http://{host}:{args.port}{MCP_PATH}"),
            soft_wrap=True,
        )
        serve_http(memory, host=args.host, port=args.port, max_tokens=args.max_tokens)
