"""Black-box probes of ``contextfold serve``: does the service give anything away?

A real server (``contextfold serve``, keys on, SQLite) and a second one with
``--no-auth``, both in front of an upstream that echoes the server's key in
every error and sets a cookie on every answer (``bench/_service.py``). For
each probe class, the inputs tried, the 5xx answers (goal 0; a 502 saying the
upstream failed, when it did, is the documented answer and not counted) and
the secrets a client saw (goal 0: the upstream key, a cookie, another
tenant's or a rebound page's data, a tenant's names in ``/metrics``, an event
after its key's revocation, a write by a cross-site form). Faults (goal 0) are
the other broken promises: a refused input kept, a stream not closed within a
second of its key's revocation, a refused oversized request answered 2xx, a cut
stream passed off as whole or logged.

    python bench/service_probes.py [--quick] [--json]
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _common import parse_args, report
from _probe_inputs import BUDGETS, HOSTS, MALFORMED_REST, MALFORMED_WIRES, TYPES, S
from _service import SECRET, EchoUpstream, Served, create_key, revoke_key

CHAT = "/v1/chat/completions"
API = "/api/v1/sessions"
JSON = {"content-type": "application/json"}


@dataclass
class Tally:
    """One probe class: inputs tried, 5xx answers, secrets seen, and its own figures."""

    tried: int = 0
    server_errors: int = 0
    secrets: int = 0
    faults: int = 0
    """Other answers that break a promise: a refused input kept, a late close, a cut
    answer passed off as whole, a refused request taking long."""
    figures: dict[str, Any] = field(default_factory=dict)

    def call(
        self,
        send: Callable[..., httpx.Response],
        *args: Any,
        upstream_failed: bool = False,
        **kwargs: Any,
    ) -> httpx.Response | None:
        """Count the answer of ``send(*args, **kwargs)``; a broken connection or a timeout
        counts as a 5xx (None is returned)."""
        try:
            answer = send(*args, **kwargs)
        except httpx.HTTPError:
            self.tried += 1
            self.server_errors += 1
            return None
        self.answer(answer, upstream_failed=upstream_failed)
        return answer

    def answer(self, answer: httpx.Response, *, upstream_failed: bool = False) -> None:
        self.tried += 1
        documented = (
            upstream_failed
            and answer.status_code == 502
            and answer.json().get("error", {}).get("code") == "upstream_error"
        )
        self.server_errors += int(answer.status_code >= 500 and not documented)
        text = answer.text + json.dumps(dict(answer.headers))
        self.secrets += int(SECRET in text or "set-cookie" in answer.headers)


@dataclass
class Rig:
    keyed: Served
    open: Served
    upstream: EchoUpstream
    key: str
    other: str  # a key of another tenant

    def client(self, key: str | None = None, *, open_server: bool = False) -> httpx.Client:
        served = self.open if open_server else self.keyed
        auth = {} if open_server else {"authorization": f"Bearer {key or self.key}"}
        return httpx.Client(base_url=served.base, headers=auth, timeout=30)


def chat(model: str, *, stream: bool = False, n: int = 1) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"question {i}"} for i in range(n)]
    return {"model": model, "messages": messages, "stream": stream}


def upstream_errors(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    statuses = (400, 401, 403, 429, 500) if quick else (400, 401, 403, 404, 407, 409, 413, 422,
                                                      429, 500, 502, 503, 504)  # fmt: skip
    with rig.client() as client:
        for status in statuses:
            for stream in (False, True):
                body = chat(f"status-{status}", stream=stream)
                sent = {"X-Contextfold-Session": f"err-{status}-{int(stream)}"}
                failed = status >= 500 or status in (401, 403, 407)
                tally.call(client.post, CHAT, json=body, headers=sent, upstream_failed=failed)
        tally.call(client.get, "/v1/models", upstream_failed=True)
        echoed = chat("stream-echo", stream=True)
        tally.call(client.post, CHAT, json=echoed, headers={"X-Contextfold-Session": "echo"})
    return tally


def cookies(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    before = rig.upstream.cookies_received
    for n in range(3 if quick else 10):
        for key in (rig.key, rig.other):
            with rig.client(key) as client:
                sent = {"X-Contextfold-Session": f"cookie-{n}"}
                tally.call(client.post, CHAT, json=chat("ok"), headers=sent)
    tally.secrets += rig.upstream.cookies_received - before
    return tally


def content_types(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    body = json.dumps(chat("ok"))
    accepted = 0
    for open_server in (False, True):
        with rig.client(open_server=open_server) as client:
            for kind in TYPES:
                headers = {"X-Contextfold-Session": "ctype"}
                if kind is not None:
                    headers["content-type"] = kind
                for path, raw in ((CHAT, body), (API, '{"id": "ctype-rest"}')):
                    answer = tally.call(client.post, path, content=raw, headers=headers)
                    accepted += int(answer is not None and answer.status_code < 400)
    tally.secrets += accepted  # a cross-site form could have written or spent the key
    tally.figures["accepted"] = accepted
    return tally


def hosts(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    with rig.client(open_server=True) as client:
        client.post(API, json={"id": "private"})
        client.post(
            f"{API}/private/messages", json={"messages": [{"role": "user", "content": "x"}]}
        )
        for host in HOSTS[:3] if quick else HOSTS:
            for method, path in (("GET", API), ("GET", f"{API}/private/messages"), ("GET", "/"),
                                 ("POST", CHAT)):  # fmt: skip
                body = chat("ok") if method == "POST" else None
                sent = {"host": host, "X-Contextfold-Session": "private"}
                answer = tally.call(client.request, method, path, json=body, headers=sent)
                tally.secrets += int(answer is not None and answer.status_code < 400)
    return tally


def series(text: str) -> set[str]:
    return {line.split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}


def metrics(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    rounds = 5 if quick else 20

    def work(client: httpx.Client, n: int) -> None:
        sid, view = f"secret-session-{n}", f"secret-view-xyz-{n}"
        client.post(API, json={"id": sid})
        pipeline = {"strategies": [{"type": "rolling", "name": f"secret-strategy-{n}"}]}
        client.put(f"{API}/{sid}/views/{view}", json={"preset": "offline", "budget": 600})
        client.put(f"{API}/{sid}/views/{view}-2", json={"pipeline": pipeline})
        words = " ".join(f"w{i}" for i in range(100))
        rounds = [
            {"role": role, "content": f"{role} {r}: {words}"}
            for r in range(10)
            for role in ("user", "assistant")
        ]
        client.post(f"{API}/{sid}/messages", json={"messages": rounds})
        client.post(f"{API}/{sid}/views/{view}/compact")
        client.request(f"SECRET{n}", f"{API}/{sid}")
        client.post(
            CHAT,
            json=chat("ok"),
            headers={"X-Contextfold-View": view, "X-Contextfold-Session": f"{sid}-proxy"},
        )

    with rig.client() as client, httpx.Client(base_url=rig.keyed.base) as anyone:
        anyone.get("/metrics")
        work(client, 0)
        first = anyone.get("/metrics")
        for n in range(1, rounds):
            work(client, n)
        last = anyone.get("/metrics")
    for answer in (first, last):
        tally.answer(answer)
        tally.secrets += answer.text.lower().count("secret")
    tally.figures["series_growth"] = len(series(last.text) - series(first.text))
    tally.figures["names_added"] = rounds - 1
    return tally


def revocation(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    key = create_key(rig.keyed.database, "probe-revoked")
    kept = {"authorization": f"Bearer {create_key(rig.keyed.database, 'probe-revoked')}"}
    with httpx.Client(base_url=rig.keyed.base, timeout=30) as client:
        auth = {"authorization": f"Bearer {key}"}
        client.post(API, json={"id": "watched"}, headers=auth).raise_for_status()
        events: list[tuple[float, str]] = []
        ended: list[float] = []
        ready = threading.Event()

        def read(url: str, headers: dict[str, str]) -> None:
            try:
                with httpx.stream("GET", url, headers=headers, timeout=30) as stream:
                    for line in stream.iter_lines():
                        ready.set()
                        events.append((time.time(), line))
            except httpx.HTTPError:
                return  # cut when the server stopped: the stream did not end by itself
            ended.append(time.time())

        readers = [
            threading.Thread(target=read, args=(f"{rig.keyed.base}{API}/watched/events", auth)),
            threading.Thread(
                target=read, args=(f"{rig.keyed.base}{API}/watched/events?api_key={key}", {})
            ),
        ]
        for reader in readers:
            reader.start()
        ready.wait(10)
        time.sleep(0.3)
        asked = time.time()
        revoke_key(rig.keyed.database, key)
        revoked = time.time()
        # An append by the tenant's other key: a revoked stream must not hear of it.
        message = {"messages": [{"role": "user", "content": "after the revocation"}]}
        tally.call(client.post, f"{API}/watched/messages", json=message, headers=kept)
        for reader in readers:
            reader.join(10)
        tally.tried += len(readers)
        tally.secrets += sum(1 for at, line in events if at > revoked and line.startswith("event:"))
        closed = len(ended) == len(readers)
        last = max(ended, default=0.0)
        # The store write happens inside `contextfold keys revoke`: from the command's start
        # (its own start-up included) is an upper bound of the time to close.
        tally.figures["closed_within_s"] = round(last - asked, 3) if closed else None
        tally.figures["revoke_command_s"] = round(revoked - asked, 3)
        tally.faults += int(not closed or last - revoked > 1.0)
        tally.call(client.get, f"{API}/watched", headers=auth)
    return tally


def message_cap(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    body = json.dumps(
        {"model": "ok", "messages": [{"role": "user", "content": "x"}] * 33_000},
        separators=(",", ":"),
    )
    waits: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=rig.keyed.base) as plain:
            while not stop.is_set():
                start = time.perf_counter()
                plain.get("/healthz")
                waits.append(time.perf_counter() - start)

    prober = threading.Thread(target=probe)
    prober.start()
    took = []
    with rig.client() as client:
        for n in range(2 if quick else 5):
            start = time.perf_counter()
            sent = {**JSON, "X-Contextfold-Session": f"big-{n}"}
            answer = tally.call(client.post, CHAT, content=body, headers=sent)
            took.append(time.perf_counter() - start)
            tally.faults += int(answer is not None and answer.status_code < 400)
    stop.set()
    prober.join()
    tally.figures["refused_in_s"] = round(max(took), 3)
    tally.figures["healthz_max_s"] = round(max(waits, default=0.0), 3)
    return tally


def malformed(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    with rig.client() as client:
        client.post(API, json={"id": "mal"})
        for path, bodies in MALFORMED_WIRES.items():
            for n, raw in enumerate(bodies):
                sent = {**JSON, "X-Contextfold-Session": f"mal-{path[4:8]}-{n}"}
                answer = tally.call(client.post, path, content=raw.replace("@S", S), headers=sent)
                tally.faults += int(answer is not None and not 400 <= answer.status_code < 500)
        for method, path, raw in MALFORMED_REST:
            raw = raw.replace("@S", S)
            tally.call(client.request, method, path, content=raw, headers=JSON)
        for n, budget in enumerate(BUDGETS):
            sent = [(b"content-type", b"application/json"), (b"x-contextfold-budget", budget),
                    (b"x-contextfold-session", f"mal-budget-{n}".encode())]  # fmt: skip
            tally.call(client.post, CHAT, content=json.dumps(chat("ok")), headers=sent)
        # Nothing of the refused requests was kept.
        kept = client.get(f"{API}/mal/messages").json()["messages"]
        kept += client.get(f"{API}/mal/views").json()["views"]
        listed = client.get(API, params={"limit": 500}).json()["sessions"]
        kept += [s for s in listed if s["id"].startswith(("mal-", ".")) and s["messages"]]
    tally.faults += len(kept)
    return tally


def truncated(rig: Rig, quick: bool) -> Tally:
    tally = Tally()
    clean = 0
    with rig.client() as client:
        for n in range(2 if quick else 5):
            sid = f"cut-{n}"
            sent = {"X-Contextfold-Session": sid}
            with client.stream(
                "POST", CHAT, json=chat("stream-cut", stream=True), headers=sent
            ) as answer:
                lines = [line for line in answer.iter_lines() if line.startswith("data:")]
                tally.tried += 1
                tally.server_errors += int(answer.status_code >= 500)
            clean += int(not lines or '"error"' not in lines[-1])
            log = client.get(f"{API}/{sid}/messages").json()["messages"]
            clean += sum(1 for m in log if m["message"]["role"] == "assistant")
    tally.faults += clean  # a cut answer passed off as whole
    return tally


PROBES = {
    "upstream_errors": upstream_errors,
    "cookies": cookies,
    "content_types": content_types,
    "hosts": hosts,
    "metrics": metrics,
    "revocation": revocation,
    "message_cap": message_cap,
    "malformed": malformed,
    "truncated": truncated,
}


@contextmanager
def rig(tmp: Path) -> Iterator[Rig]:
    with ExitStack() as stack:
        upstream = stack.enter_context(EchoUpstream())
        # Malformed Messages bodies are refused before any upstream is reached.
        spec = (f"openai-compatible:{upstream.url}", f"anthropic:{upstream.url}")
        database = str(tmp / "keyed.db")
        key = create_key(database, "secret-tenant-one")
        other = create_key(database, "secret-tenant-two")
        keyed = stack.enter_context(Served(database, tmp / "keyed.log", upstream=spec))
        opened = Served(str(tmp / "open.db"), tmp / "open.log", upstream=spec, auth=False)
        yield Rig(keyed, stack.enter_context(opened), upstream, key, other)


def run(quick: bool) -> dict[str, Any]:
    """Every probe class against fresh servers: the figures by class, and totals."""
    figures: dict[str, Any] = {}
    totals = Tally()
    with tempfile.TemporaryDirectory() as tmp, rig(Path(tmp)) as served:
        for name, probe in PROBES.items():
            found = probe(served, quick)
            for key, value in asdict(found).items():
                if key == "figures":
                    figures.update({f"{name}_{k}": v for k, v in value.items()})
                else:
                    figures[f"{name}_{key}"] = value
                    setattr(totals, key, getattr(totals, key) + value)
        # The upstream key in the servers' own logs (stderr) is a secret kept badly too.
        logs = served.keyed.log.read_text() + served.open.log.read_text()
        figures["server_log_secrets"] = logs.count(SECRET)
    figures.update(
        tried=totals.tried,
        server_errors=totals.server_errors,
        secrets_seen=totals.secrets + figures["server_log_secrets"],
        faults=totals.faults,
    )
    return figures


def main() -> None:
    args = parse_args(__doc__ or "")
    report(run(args.quick), args.json)


if __name__ == "__main__":
    main()
