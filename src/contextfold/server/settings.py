"""What a running service is configured with: one frozen record, built by the CLI or a test."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from contextfold.core.errors import InvalidInput
from contextfold.llm.registry import provider_names
from contextfold.llm.windows import Window
from contextfold.redact import redact
from contextfold.server.proxy_upstream import parse_upstream
from contextfold.strategies.presets import check_preset, default_preset

DEFAULT_DATABASE = "contextfold.db"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_BODY_BYTES = 1 << 20
LOCAL_TENANT = "local"


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (``localhost`` included)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Settings:
    """The service's settings; ``auth=False`` is refused unless ``host`` is a loopback address."""

    database: str = DEFAULT_DATABASE
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    auth: bool = True
    upstream: str | tuple[str, ...] | None = None
    """The proxy's model servers: ``openai-compatible:URL`` and/or ``anthropic:URL``, one a
    kind (``upstreams``)."""
    upstream_key_env: str = "CONTEXTFOLD_UPSTREAM_KEY"
    """The variable holding the OpenAI-compatible upstream's key."""
    anthropic_key_env: str = "ANTHROPIC_API_KEY"
    """The variable holding the Anthropic upstream's key."""
    upstream_timeout_s: float = 600.0  # the proxy's wait for an upstream answer (read, write)
    model: str | None = None
    """The summarizer (a ``get_model`` spec) of the views the proxy creates; None: none
    (model strategies fold with the offline stand-in)."""
    preset: str | None = None
    """The preset of the views the proxy creates; None: ``chat`` with a model, else ``offline``."""
    budget: int | None = None
    """A fixed budget for the views the proxy creates; None: the request model's window
    less room for the answer (``contextfold.server.proxy_budget``)."""
    model_windows: Mapping[str, Window] = field(default_factory=dict)
    recall_tools: bool = False
    """Offer the recall tools to the upstream model and answer their calls in the proxy
    (``contextfold.server.proxy_recall``); a request's ``X-Contextfold-Recall-Tools`` header
    overrides it."""
    cache_breakpoints: bool = True
    """Mark where a proxied Anthropic Messages prompt is stable with ``cache_control``
    breakpoints, when the client marked none (``contextfold.server.proxy_cache``)."""
    recall_rounds: int = 3
    """The most recall rounds the proxy answers in one call; the request after the last
    forbids tool calls."""
    """Context windows added to (or overriding) the known ones, by model name."""
    max_body_bytes: int = MAX_BODY_BYTES
    cors_origins: tuple[str, ...] = ()
    demo: bool = False
    runner: bool = True
    """Compact watched views in the background; off when other processes do it."""
    runner_workers: int = 2
    runner_processes: int = 1
    """Worker processes for model-free folding (``ProcessRunner``): the extractive
    selection is CPU work that, on a thread, would hold the GIL the requests need.
    0 folds on the runner's threads (``ThreadRunner``)."""
    settle_s: float = 0.25
    """How long the runner lets a session's appends gather before planning it: one plan
    per burst, not one per append, keeps planning off the requests' CPU."""
    offload: bool | None = None
    """Run handlers' store work on worker threads; None: only for stores that wait on a
    network (PostgreSQL), not for SQLite and RAM, which answer faster than a thread hop."""
    key_cache_s: float = 1.0
    """How long a verified API key is trusted without a store read (a revoked key
    stops working within this long); 0 checks the store on every request."""
    wake_poll_s: float = 0.5
    """How often appends by other processes to a SQLite file are looked for."""
    workers: str | None = None
    """A Redis URL: compaction jobs go to ``contextfold worker`` processes through it
    (``CeleryRunner``) instead of this process's runner; None compacts here."""
    queue: str = "contextfold"
    """The workers' queue on that Redis (workers started with the same ``--queue``)."""
    processes: int = 1
    """Server processes sharing the port (``contextfold.server.processes``), each with its
    own service and runner; more than one needs a store they share (not ``memory://``)."""

    def view_preset(self, *, agent: bool) -> str:
        """The preset of the views the proxy creates: ``preset`` when set, else the default
        for a view with the served model or none, for an agent's traffic or a chat's."""
        if self.preset is not None:
            return self.preset
        return default_preset(model=self.model is not None, agent=agent)

    @property
    def upstreams(self) -> dict[str, str]:
        """Each configured upstream's base URL by kind (``openai``, ``anthropic``)."""
        specs = (self.upstream,) if isinstance(self.upstream, str) else self.upstream or ()
        found: dict[str, str] = {}
        for spec in specs:
            kind, url = parse_upstream(spec)
            if kind in found:
                raise InvalidInput(
                    f"upstream: one {kind} upstream at most, not {redact(found[kind])!r} and "
                    f"{redact(url)!r}",
                    field="upstream",
                )
            found[kind] = url
        return found

    def upstream_key(self, kind: str) -> str:
        """The name of the variable holding the key of the upstream of ``kind``."""
        return self.anthropic_key_env if kind == "anthropic" else self.upstream_key_env

    def __post_init__(self) -> None:
        if not self.auth and not is_loopback(self.host):
            raise InvalidInput(
                f"--no-auth is allowed only on a loopback address (127.0.0.1, ::1, localhost), "
                f"not {self.host!r}: anyone who can reach the port would read every session",
                field="no_auth",
            )
        if not 0 <= self.port <= 65535:
            raise InvalidInput(f"port must be in 0..65535, not {self.port}", field="port")
        if self.max_body_bytes < 1:
            raise InvalidInput("max_body_bytes must be positive", field="max_body_bytes")
        if type(self.recall_rounds) is not int or self.recall_rounds < 1:
            raise InvalidInput("recall_rounds must be a positive integer", field="recall_rounds")
        if type(self.processes) is not int or self.processes < 1:
            raise InvalidInput("processes must be a positive integer", field="processes")
        if self.processes > 1 and self.database.startswith("memory:"):
            raise InvalidInput(
                "processes: memory:// is one process's store; several server processes "
                "need a SQLite file or PostgreSQL",
                field="processes",
            )
        if self.runner_processes < 0:
            raise InvalidInput("runner_processes must be 0 or more", field="runner_processes")
        self.upstreams  # noqa: B018 (checks each spec)
        if self.budget is not None and self.budget < 1:
            raise InvalidInput("budget must be a positive integer", field="budget")
        if self.preset is not None:
            check_preset(self.preset)
        if self.model is not None and self.model.partition(":")[0] not in provider_names():
            raise InvalidInput(
                f"model is provider:name with a provider of {', '.join(provider_names())}",
                field="model",
            )
        if self.workers is not None:
            if not self.workers.startswith(("redis://", "rediss://", "unix://")):
                raise InvalidInput(
                    f"--workers is a Redis URL (redis://host:6379/0), not {redact(self.workers)!r}",
                    field="workers",
                )
            if not self.runner:
                raise InvalidInput(
                    "--workers sends the jobs this process plans: it cannot go with --no-runner",
                    field="workers",
                )
