"""Recall an agent can ask for: tools a model calls to look up what was folded.

Automatic recall (``contextfold.memory.recall``) guesses from the latest user
message; these tools let the model ask. ``RecallTools`` offers three of them as
OpenAI function-tool schemas (``definitions``) and answers their calls
(``answer``) with JSON text for the model:

- ``contextfold_search``: the store's full-text search over the session's log
  (``Store.search``), ranked, filtered by role and by time, each hit with its
  seq, role, time, a snippet and the fold that covers it;
- ``contextfold_expand``: a fold (by id) or a seq range back to the raw
  messages it covers, a page at a time within ``max_tokens``, tool units whole
  when a page can hold them;
- ``contextfold_folds``: the view's folds, each with its range, kind, tokens
  and a one-line summary.

Every fold names its range in the prompt (``[folded: seq 12-40]``,
``contextfold.core.folds.range_label``), so a model knows what to expand.

The role and seq bounds go to the store's search, which applies them before it
keeps its ``search.CANDIDATES`` best messages, so a rare role behind many
matches of another is still found. A time bound is first turned into a seq
bound (seqs are logged in time order), so a search ``before`` a time ranks the
newest matches before it, as a search ``before`` a seq does.

A ``RecallTools`` is bound to one session and one branch of it (the newest
message's, or ``on(branch)``): it reads nothing else, so a fold id or a seq
range naming another session's (another tenant's) finds nothing. A model's
mistake (arguments that are not JSON, a wrong field, an unknown fold) is an
error result naming the field, never an exception: the agent's turn goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.memory.recall_answers import Answering, ReadFolds
from contextfold.memory.recall_calls import (
    EXPAND,
    FIELDS,
    FOLDS,
    SEARCH,
    ToolError,
    call_arguments,
    result_text,
    tool_definitions,
)
from contextfold.memory.session import Session
from contextfold.memory.view import View

# The least ``max_tokens`` a page can be filled in.
MIN_MAX_TOKENS = 200


def check_max_tokens(value: object, field: str = "max_tokens") -> int:
    """A bound on each recall answer, as every surface takes it (``field`` names it)."""
    if type(value) is not int or value < MIN_MAX_TOKENS:
        raise InvalidInput(f"{field} must be an integer of at least {MIN_MAX_TOKENS}", field=field)
    return value


class RecallTools:
    """The recall tools over one session's view, answering a model's calls.

    ``max_tokens`` bounds each answer (counted with the session's counter): a
    search keeps its best hits that fit, an expansion pages.
    """

    def __init__(self, session: Session, view: str = "default", *, max_tokens: int = 2000) -> None:
        if not isinstance(session, Session):
            raise InvalidInput("session must be a Session", field="session")
        check_max_tokens(max_tokens)
        self.session = session
        self.view: View = session.view(view)
        self.max_tokens = max_tokens
        self.read_folds = ReadFolds()

    def on(self, branch: int | None) -> RecallTools:
        """These tools over the branch ending at seq ``branch`` (None: the newest
        message's), as ``View.on``: hits and folds of other branches are not shown."""
        tools = RecallTools(self.session, self.view.name, max_tokens=self.max_tokens)
        tools.view = self.view.on(branch)
        tools.read_folds = self.read_folds  # kept per branch path: shared, never mixed up
        return tools

    def bound(self, branch: Callable[[], int | None] | None = None) -> list[BoundRecallTool]:
        """The tools one by one, as a framework's own function tools wrap them.

        ``branch`` gives the branch at each call (an adapter's head moves
        between turns); None: the branch these tools are on.
        """
        return [
            BoundRecallTool(
                name=d["function"]["name"],
                description=d["function"]["description"],
                parameters=d["function"]["parameters"],
                tools=self,
                branch=branch,
            )
            for d in self.definitions
        ]

    @property
    def definitions(self) -> list[dict[str, Any]]:
        """The tools as OpenAI Chat Completions function-tool schemas (fresh copies)."""
        return tool_definitions()

    @property
    def names(self) -> frozenset[str]:
        return frozenset(FIELDS)

    def answer(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """The result of calling tool ``name`` with ``arguments`` (JSON text or a mapping),
        as JSON text for the model; a model's mistake is ``{"error", "field"}``.

        An unknown ``name`` is the caller's mistake, not the model's: ``InvalidInput``.
        """
        if name not in FIELDS:
            raise InvalidInput(
                f"{name!r} is not a recall tool ({', '.join(sorted(FIELDS))})", field="name"
            )
        try:
            args = call_arguments(arguments, FIELDS[name])
            answering = Answering(self.session, self.view, self.max_tokens, self.read_folds)
            if name == SEARCH:
                result = answering.search(args)
            elif name == EXPAND:
                result = answering.expand(args)
            else:
                result = answering.folds(args)
        except ToolError as exc:
            result = {"error": exc.reason, "field": exc.field}
        return result_text(result)


@dataclass(frozen=True)
class BoundRecallTool:
    """One recall tool bound to a session's view: what a framework's function tool needs
    (a name, a description, the JSON schema of its arguments) and ``call``.

    ``call`` reads the store: an async framework runs it off its event loop.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    tools: RecallTools
    branch: Callable[[], int | None] | None = None

    def call(self, arguments: str | Mapping[str, Any]) -> str:
        """The tool's JSON result for ``arguments`` (JSON text or a mapping), on the branch
        ``branch()`` gives now."""
        tools = self.tools if self.branch is None else self.tools.on(self.branch())
        return tools.answer(self.name, arguments)


__all__ = ["EXPAND", "FOLDS", "SEARCH", "BoundRecallTool", "RecallTools", "tool_definitions"]
