"""A view's configuration as this process runs it: the stored record at a version,
with the objects given here that cannot be stored.

The record (``ViewConfig``) is read when the view's configuration version
moves, and built once when it is checked: the pipeline it keeps is the one
that runs, so a version costs one build per process, however many handles
read it. An update keeps the config it checked and stored, so the process that
made it builds nothing more. What a caller gave this process (a pipeline
object, a Python filter, a model object) is used beside the record: the
pipeline only while the record is still the version it was stored as.
"""

from __future__ import annotations

from dataclasses import dataclass

from contextfold.core.errors import InvalidInput
from contextfold.llm.base import LLM
from contextfold.memory.config import ViewChanges, ViewConfig
from contextfold.memory.filters import MessageFilter
from contextfold.store.base import Store
from contextfold.strategies.pipeline import Pipeline


@dataclass(frozen=True)
class Configured:
    """A view's configuration at one stored version (0: never stored), ready to run."""

    version: int
    config: ViewConfig
    pipeline: Pipeline | None
    """The pipeline that runs: the one given here for this version, else the record's."""
    filter: MessageFilter | None
    """The filter that runs: a Python callable given here, else the record's, compiled."""


class Configuration:
    """This process's side of one view's configuration, shared by the handles a
    ``Memory`` gives out: the objects given here and the record last read."""

    def __init__(self) -> None:
        self.llm: LLM | None = None
        self.filter: MessageFilter | None = None
        self._pipeline: tuple[int, Pipeline] | None = None
        self._current: Configured | None = None

    def at(self, store: Store, session_id: str, view: str, version: int) -> Configured:
        """The configuration at ``version``: kept, or read from the store once."""
        current = self._current
        if current is not None and current.version == version:
            return current
        record = store.get_view(session_id, view)
        if record is None:
            return self._keep(0, ViewConfig())
        return self._keep(record.version, ViewConfig.from_data(record.config))

    def update(
        self,
        store: Store,
        session_id: str,
        view: str,
        version: int,
        changes: ViewChanges,
        expected_version: int | None,
    ) -> ViewConfig:
        """Store the config at ``version`` with ``changes`` (if they change it, or it was
        never stored), and keep it as the new version's: checked, and so built, once."""
        if expected_version is not None and (
            isinstance(expected_version, bool) or not isinstance(expected_version, int)
        ):
            raise InvalidInput("expected_version must be an integer", field="expected_version")
        if version == 0:  # never stored: the changes on top of the defaults
            config = ViewConfig.from_data(changes)
        else:
            current = self.at(store, session_id, view, version).config
            config = current.changed(changes)
            if config == current:
                return config
        record = store.put_view(
            session_id, view, config.to_data(), expected_version=expected_version
        )
        self._keep(record.version, config)
        return config

    def give(
        self,
        *,
        pipeline: Pipeline | None = None,
        filter: MessageFilter | None = None,
        llm: LLM | None = None,
    ) -> None:
        """Use these objects for the view in this process: ``pipeline`` for the version
        last read or stored (the one it was configured as)."""
        if llm is not None:
            self.llm = llm
        if filter is not None:
            self.filter = filter
        current = self._current
        if pipeline is not None:
            assert current is not None, "a pipeline is given with the update that stores it"
            self._pipeline = (current.version, pipeline)
        if current is not None:
            self._keep(current.version, current.config)

    def _keep(self, version: int, config: ViewConfig) -> Configured:
        given = self._pipeline
        pipeline = given[1] if given is not None and given[0] == version else config.built_pipeline
        configured = Configured(version, config, pipeline, self.filter or config.message_filter())
        self._current = configured
        return configured
