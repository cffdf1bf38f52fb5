"""What the middleware and the chat history share: a view's settings, its compaction, and its
prompt handed back as LangChain messages.

The rendered prompt is made of chat messages without ``meta``. A raw one is
handed back as the very LangChain object it was made from when the caller
has it (the graph's state: ids, reasoning and artifacts intact), matched by
what a model sees of it; otherwise it is rebuilt from the log
(``messages.chat_to_langchain``). Folds, masked results and recall blocks
become plain LangChain messages of their role.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage

from contextfold.core.checks import check_budget, check_name
from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.core.render import Rendered
from contextfold.integrations.agent_views import agent_view_settings
from contextfold.integrations.langchain.messages import chat_to_langchain
from contextfold.memory.matching import digest
from contextfold.memory.session import Session
from contextfold.memory.view import View
from contextfold.runtime.core import Runner

SYSTEM_ROLES = frozenset({"system", "developer"})


@dataclass
class ViewPrompts:
    """One view's prompts over any session: ``settings`` stored on first use in this process
    (only those that differ change), compaction inline before each render or by ``runner``
    in the background, and the render at ``budget`` (None: the view's)."""

    view: str = "default"
    budget: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    runner: Runner | None = None
    agent: bool = False
    """An agent's prompts: a view created with a model and no preset gets the agent's
    default (``integrations.agent_views``)."""
    _ready: set[tuple[int, str, float]] = field(default_factory=set)

    def __post_init__(self) -> None:
        check_budget(self.budget)
        check_name(self.view, "view")
        if not isinstance(self.settings, Mapping):
            raise InvalidInput("view settings must be a mapping", field="settings")
        if self.runner is not None and not isinstance(self.runner, Runner):
            raise InvalidInput("runner must be a contextfold runner", field="runner")

    def open(self, session: Session, branch: int | None = None) -> View:
        """The view on ``branch`` (None: the newest), configured and watched once per session."""
        key = (id(session.memory), session.id, session.created_at)
        if key not in self._ready:
            settings = agent_view_settings(self.settings) if self.agent else self.settings
            view = session.view(self.view, **settings)
            if self.runner is not None:
                self.runner.watch(view)
            self._ready.add(key)
        return session.view(self.view).on(branch)

    def render(self, session: Session, branch: int | None, *, system: int = 0) -> Rendered:
        """The branch's prompt; compacted first unless a runner does it in the background.

        ``system``: the tokens of a system prompt the caller sends in place of the
        log's; the prompt is fit so that it still holds with that one.
        Compaction never raises for a failing model (the view keeps its folds),
        so a summarizer that fails leaves the turn to go on with the last folds.
        """
        view = self.open(session, branch or None)
        if self.runner is None:
            view.compact(self.budget)
        rendered = view.render_report(self.budget)
        logged = rendered.messages[0] if rendered.messages else None
        if logged is not None and logged["role"] in SYSTEM_ROLES:
            system -= session.counter.message(logged)
        if (
            system > 0
            and rendered.budget is not None
            and rendered.tokens + system > rendered.budget
        ):
            rendered = view.render_report(rendered.budget - system)
        return rendered


def to_langchain(
    rendered: Sequence[Message], originals: Sequence[tuple[bytes, BaseMessage]]
) -> list[BaseMessage]:
    """The rendered prompt as LangChain messages: each raw message the original object it was
    made from (``originals``: each with the digest of its chat message), anything else rebuilt.

    Of originals seen the same ("ok" said twice), the newest unused one is taken,
    walking the prompt from its end: a prompt ends with the newest raw messages.
    """
    waiting: dict[bytes, list[BaseMessage]] = defaultdict(list)
    for seen, original in originals:
        waiting[seen].append(original)
    out: list[BaseMessage] = []
    for message in reversed(rendered):
        same = waiting.get(digest(message))
        out.append(same.pop() if same else chat_to_langchain(message))
    return out[::-1]
