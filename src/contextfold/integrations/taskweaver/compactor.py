"""The seed's ``ContextCompactor``, running contextfold's rolling compactor in the background.

A compactor owns one contextfold ``View``: its pipeline is ``RollingCompactor``
(threshold, retain_recent, prompt from ``CompactorConfig``), its model is
``llm_api``, its filter shows the rounds of its role (``rounds.role_filter``).
``start`` hands the view to a ``ThreadRunner`` with one daemon worker, the
seed's one thread per compactor: every append to the session wakes the runner,
which plans (more than ``threshold`` rounds after the summary?) and folds
everything but the last ``retain_recent`` rounds into one rolling fold. The
runner, not a loop of our own, so the rules every view follows hold here too:
one compaction of a view at a time, appends coalesced while it runs, a commit
refused when the folds moved meanwhile, a failed model call leaving the
previous fold in place.

Where the rounds come from:

- registered with ``contextfold.integrations.taskweaver.Memory`` (``register_compaction_provider``),
  the compactor is *bound*: its view is a view named after the role over the
  memory's own session, which already logs every round. Compactors of other
  roles have views of their own over the same log and never see its folds.
- otherwise it is *standalone*: ``rounds_getter`` is read on ``start`` and on
  every ``notify_rounds_changed``, and what is new is logged into a session of
  its own, kept in RAM (``RoundLog.mirror``).

``get_compaction`` never waits for a running job: it reads the fold committed
last, whose data holds the seed's ``start_index``, ``end_index`` and ``summary``.
"""

from __future__ import annotations

import re
import textwrap
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from contextfold.core.errors import InvalidInput
from contextfold.integrations.taskweaver.rounds import RoundLike, RoundLog, role_filter
from contextfold.llm.base import LLM
from contextfold.memory.session import Memory as LogMemory
from contextfold.memory.view import View
from contextfold.runtime.thread import ThreadRunner
from contextfold.strategies.pipeline import Pipeline
from contextfold.strategies.rolling import RollingCompactor
from contextfold.strategies.templates import fill

_YAML_BLOCK = re.compile(r"content:\s*\|[-+]?\s*")


@dataclass(frozen=True)
class CompactedMessage:
    """Single compacted message representing summarized conversation history."""

    start_index: int
    end_index: int
    summary: str

    def to_system_message(self) -> str:
        return (
            f"[Conversation History Summary (Rounds {self.start_index}-{self.end_index})]\n"
            f"{self.summary}"
        )


@runtime_checkable
class CompactionProvider(Protocol):
    """What ``Memory`` asks of a compactor."""

    def get_compaction(self) -> CompactedMessage | None:
        """The current compaction, if any; must not block."""
        ...

    def notify_rounds_changed(self, total_rounds: int) -> None:
        """Rounds were added; may start a compaction in the background."""
        ...


@dataclass(frozen=True)
class CompactorConfig:
    """``threshold``: compact once more rounds than this follow the summary;
    ``retain_recent``: rounds left verbatim; ``prompt_template_path``: the
    summarizer prompt (text, or the seed's YAML with a ``content: |`` block,
    with a ``{content}`` field), empty for the built-in one of the role."""

    threshold: int = 10
    retain_recent: int = 3
    prompt_template_path: str = ""

    def __post_init__(self) -> None:
        for name in ("threshold", "retain_recent"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInput(
                    f"{name} must be a whole number of rounds >= 0, not {value!r}", field=name
                )
        if not isinstance(self.prompt_template_path, str):
            raise InvalidInput(
                "prompt_template_path must be a string", field="prompt_template_path"
            )


class ContextCompactor:
    """Background compactor, one per agent (``role`` names its view and filter).

    ``role`` may be left out: ``Memory.register_compaction_provider`` gives
    the role it is registered under. Without a prompt file, a role whose name
    contains "code" gets the seed's code-interpreter prompt, any other the
    planner's. ``budget`` is the view's render budget, for agents that render
    ``compactor.view`` instead of assembling rounds. ``llm_api`` None runs
    contextfold's offline stand-in.
    """

    def __init__(
        self,
        config: CompactorConfig,
        llm_api: LLM | None,
        rounds_getter: Callable[[], Sequence[RoundLike]],
        *,
        role: str | None = None,
        budget: int | None = None,
    ) -> None:
        self.config = config
        self.llm_api = llm_api
        self.rounds_getter = rounds_getter
        self.role = role
        self.budget = budget
        path = config.prompt_template_path
        self._prompt = read_prompt(path) if path else None
        self._lock = threading.Lock()
        self._runner: ThreadRunner | None = None
        self._bound = False
        self._log = RoundLog(LogMemory().session(f"taskweaver-{role or 'compactor'}"))
        self._view = self._make_view()

    @property
    def view(self) -> View:
        """The contextfold view this compactor folds."""
        return self._view

    @property
    def log(self) -> RoundLog:
        """Where its rounds are logged: the bound memory's, or its own."""
        return self._log

    def _make_view(self) -> View:
        code = self.role is not None and "code" in self.role.lower()
        strategy = RollingCompactor(
            threshold=self.config.threshold,
            retain_recent=self.config.retain_recent,
            kind="code" if code else "planner",
            prompt=self._prompt,
        )
        return self._log.session.view(
            self.role or "compactor",
            pipeline=Pipeline([strategy]),
            filter=role_filter(self._log, self.role),
            llm=self.llm_api,
            budget=self.budget,
        )

    def attach(self, log: RoundLog, role: str) -> None:
        """Bind to a memory's log (``Memory.register_compaction_provider`` calls this).

        The view moves to the memory's session; a runner already started
        follows it. What the standalone session held is left behind.
        """
        with self._lock:
            if self._log is log:
                return
            old = self._view
            self.role = self.role or role
            self._log = log
            self._bound = True
            self._view = self._make_view()
            runner = self._runner
        if runner is not None:
            runner.unwatch(old)
            runner.watch(self._view)

    def start(self) -> None:
        """Start background compaction; it plans at once on the rounds logged so far."""
        with self._lock:
            if self._runner is not None:
                return
            runner = self._runner = ThreadRunner(workers=1)
        self._mirror()
        runner.watch(self._view)

    def stop(self, timeout: float = 0.0) -> bool:
        """Stop the worker. A compaction still running gets ``timeout`` seconds to commit
        (none by default, so this returns at once); after that it never commits.
        True when nothing was abandoned."""
        with self._lock:
            runner, self._runner = self._runner, None
        if runner is None:
            return True
        return runner.stop(timeout=timeout, drain=timeout > 0)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no compaction is queued or running (scripts and tests)."""
        runner = self._runner
        return True if runner is None else runner.wait_idle(timeout)

    def notify_rounds_changed(self, total_rounds: int) -> None:
        """Standalone: log the new rounds; their appends wake the runner, which compacts
        when more than ``threshold`` rounds follow the summary. Bound: the memory's
        appends already woke it."""
        self._mirror()

    def _mirror(self) -> None:
        if not self._bound:
            self._log.mirror(self.rounds_getter())

    def get_compaction(self) -> CompactedMessage | None:
        """The current compaction, from committed folds only: never waits for a job."""
        found = self._current()
        return None if found is None else found[0]

    def compaction_for(self, rounds: Sequence[RoundLike]) -> CompactedMessage | None:
        """The compaction with ``end_index`` counted over ``rounds``, so that
        ``rounds[end_index:]`` are exactly the rounds it does not cover.

        The view hides failed rounds, so the two counts differ when ``rounds``
        holds failed ones or a round failed after it was folded.
        """
        found = self._current()
        if found is None:
            return None
        compaction, end_seq = found
        covered = 0
        for round in rounds:
            seq = self._log.seq_of(round.id)
            if seq is None or seq > end_seq:
                break
            covered += 1
        if covered == 0:
            return None
        return replace(compaction, end_index=covered)

    def _current(self) -> tuple[CompactedMessage, int] | None:
        """The active rolling fold as a ``CompactedMessage``, and the last seq it covers."""
        folds = [f for f in self._view.folds() if isinstance(f.data.get("end_index"), int)]
        if not folds:
            return None
        fold = max(folds, key=lambda f: f.end)
        data = fold.data
        message = CompactedMessage(
            int(data["start_index"]), int(data["end_index"]), data["summary"]
        )
        return message, fold.end


def read_prompt(path: str | Path) -> str:
    """A summarizer prompt from a file: plain text, or the seed's YAML ``content: |`` block.

    Read when the compactor is built, so a missing file or a prompt without
    its ``{content}`` field fails there, not later in the background.
    """
    file = Path(path)
    if not file.is_file():
        raise InvalidInput(f"prompt template {file} does not exist", field="prompt_template_path")
    text = file.read_text(encoding="utf-8")
    if file.suffix in (".yaml", ".yml"):
        text = _yaml_content(text, file)
    if "{content}" not in text:
        raise InvalidInput(
            f"prompt template {file} has no {{content}} field", field="prompt_template_path"
        )
    try:
        fill(text, content="")
    except (InvalidInput, ValueError, IndexError) as exc:
        raise InvalidInput(
            f"prompt template {file}: {exc} (write other braces as {{{{ and }}}})",
            field="prompt_template_path",
        ) from exc
    return text


def _yaml_content(text: str, file: Path) -> str:
    """The ``content: |`` block of a prompt file in the seed's YAML form (no YAML library)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _YAML_BLOCK.fullmatch(line):
            block: list[str] = []
            for rest in lines[i + 1 :]:
                if rest.strip() and not rest[:1].isspace():
                    break
                block.append(rest)
            return textwrap.dedent("\n".join(block)).strip("\n") + "\n"
    raise InvalidInput(
        f"prompt template {file} has no 'content: |' block", field="prompt_template_path"
    )
