"""What the proxy keeps per app: the upstream clients by kind, session locks,
the logged messages that keep a wire's meta, and the Claude calibration."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request

from contextfold.llm.claude_calibration import Calibration
from contextfold.memory.kept import KeptMeta
from contextfold.server.errors import ServiceError
from contextfold.server.proxy_budget import upstream_count
from contextfold.server.proxy_upstream import KINDS, Upstream
from contextfold.server.proxy_wire import Wire

_PREFIXES = {kind: prefix for prefix, kind in KINDS.items()}


@dataclass
class ProxyState:
    """What the proxy keeps per app: the upstream clients by kind, session locks."""

    upstreams: dict[str, Upstream]
    locks: dict[str, tuple[asyncio.Lock, int]] = field(default_factory=dict)
    kept: KeptMeta = field(default_factory=KeptMeta)
    calibration: Calibration | None = None
    """Claude's factor measured by the Anthropic upstream's ``count_tokens``, when there is one."""

    def upstream(self, wire: Wire) -> Upstream:
        """The upstream that serves ``wire``; a 502 naming the flag when there is none."""
        found = self.upstreams.get(wire.upstream)
        if found is None:
            raise ServiceError(
                502,
                "upstream_error",
                f"this server has no {wire.upstream} upstream, so no {wire.name} proxy: start "
                f"it with --upstream {_PREFIXES.get(wire.upstream, wire.upstream + ':')}URL",
            )
        return found

    async def hold(self, key: str) -> Callable[[], None]:
        """Wait for the session's lock; returns its release (idempotent)."""
        held = self.locks.get(key)
        lock, users = held if held is not None else (asyncio.Lock(), 0)
        self.locks[key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:
            self._leave(key)
            raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                lock.release()
                self._leave(key)

        return release

    def _leave(self, key: str) -> None:
        lock, users = self.locks[key]
        if users == 1:
            del self.locks[key]
        else:
            self.locks[key] = (lock, users - 1)

    async def aclose(self) -> None:
        """Cancel the counts still running, then close the upstream clients."""
        if self.calibration is not None:
            await self.calibration.aclose()
        for upstream in self.upstreams.values():
            await upstream.aclose()


def proxy_state(request: Request) -> ProxyState:
    """The app's proxy state, made on first use inside the server's event loop."""
    state: ProxyState | None = getattr(request.app.state, "proxy", None)
    if state is None:
        settings = request.app.state.service.settings
        upstreams = {
            kind: Upstream(
                url,
                api_key=os.environ.get(settings.upstream_key(kind)) or None,
                timeout_s=settings.upstream_timeout_s,
                kind=kind,
            )
            for kind, url in settings.upstreams.items()
        }
        anthropic = upstreams.get("anthropic")
        calibration = None if anthropic is None else Calibration(upstream_count(anthropic))
        state = ProxyState(upstreams, calibration=calibration)
        request.app.state.proxy = state
    return state
