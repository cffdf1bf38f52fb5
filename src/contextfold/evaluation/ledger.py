"""``--results FILE``: every replay, answer and grade written as it comes, and read back to resume.

The file is JSONL, one record a line, flushed as it is written, so a run that
is stopped (killed, a model gone) keeps everything it had. Each record has a
``kind`` (``run``, ``replay``, ``answer``, ``grade``, ``exact``) and a ``key`` naming the
item; read back, the last record of a key wins, and an answer or grade that
failed is not done, so a re-run with the same file asks again only what is
missing or failed. The ``run`` record holds the settings the answers depend
on (the model and judge by name, not by URL: a restarted server may move;
the encoding, samples and probes); a file from other settings is refused
rather than mixed in. Without a file the ledger only keeps records in memory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from contextfold.core.errors import InvalidInput


class Ledger:
    """The records of one evaluation, read from and appended to ``path`` when given."""

    def __init__(self, path: Path | None, settings: Mapping[str, Any]) -> None:
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        self.resumed = 0
        """Records read back from an earlier run."""
        self._file: IO[str] | None = None
        if path is None:
            return
        if path.exists():
            self._read(path, settings)
        try:
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"cannot write {path}: {exc}", field="results") from exc
        if not self.records:
            self.write({"kind": "run", "key": "run", "settings": dict(settings)})

    def _read(self, path: Path, settings: Mapping[str, Any]) -> None:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    key = str(record["key"])
                except (ValueError, KeyError, TypeError):
                    # A run killed mid-write leaves its last line cut: that item is redone.
                    if number > 1 and not line.endswith("\n"):
                        continue
                    raise InvalidInput(
                        f"{path} line {number} is not a results record", field="results"
                    ) from None
                self.records[key] = record
        run = self.records.get("run")
        if run is not None and run.get("settings") != dict(settings):
            raise InvalidInput(
                f"{path} holds results of other settings ({run.get('settings')}); give "
                "another --results file",
                field="results",
            )
        self.resumed = sum(1 for key in self.records if key != "run")

    def done(self, key: str) -> dict[str, Any] | None:
        """The record of ``key`` when it is done (written, and not a failure)."""
        record = self.records.get(key)
        if record is None or record.get("error") is not None:
            return None
        return record

    def write(self, record: dict[str, Any]) -> None:
        """Keep ``record`` (under its ``key``) and append it to the file, flushed."""
        self.records[str(record["key"])] = record
        if self._file is not None:
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
