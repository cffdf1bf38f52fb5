"""A chat message history for LCEL chains (``RunnableWithMessageHistory``) over a session.

::

    chain = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: ContextfoldChatMessageHistory(memory, session_id, budget=4000),
        input_messages_key="question", history_messages_key="history",
    )

``messages`` is the view's compacted prompt (folds as plain messages, the
recent messages verbatim, as they were added: ids, reasoning and artifacts
restored from the log), so the chain's prompt fits the budget however long
the conversation; ``add_messages`` logs, in one append. ``clear`` deletes the
session whole, its log and views included: the log is append-only, and
deleting the session is its one way anything logged goes away.

LangChain marks ``BaseChatMessageHistory`` deprecated from langchain-core 1.6.4
(for LangGraph's checkpointers); it still drives ``RunnableWithMessageHistory``.
An agent built with ``create_agent`` takes ``ContextfoldMiddleware`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

from contextfold.core.errors import InvalidInput
from contextfold.integrations.langchain.messages import chat_to_langchain, langchain_to_chat
from contextfold.integrations.langchain.prompts import ViewPrompts, to_langchain
from contextfold.integrations.langchain.recall import bound_tools
from contextfold.memory.matching import digest
from contextfold.memory.recall_tools import RecallTools
from contextfold.memory.session import Memory, Session
from contextfold.runtime.core import Runner


class ContextfoldChatMessageHistory(BaseChatMessageHistory):
    """One session's conversation for a chain: read as the view's prompt, written to the log.

    ``system`` is the session's system prompt (logged first when the session is
    new; ``InvalidInput`` if it has another). The view's ``settings``, ``budget``
    and ``runner`` are as for ``ContextfoldMiddleware``.
    """

    def __init__(
        self,
        memory: Memory,
        session_id: str,
        *,
        system: str | None = None,
        view: str = "default",
        budget: int | None = None,
        settings: Mapping[str, Any] | None = None,
        runner: Runner | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(memory, Memory):
            raise InvalidInput("memory must be a contextfold Memory", field="memory")
        self.memory = memory
        self.system = system
        self.session: Session = memory.session(session_id, system=system)
        self.prompts = ViewPrompts(view, budget, settings or {}, runner)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The view's prompt for the newest branch, as LangChain messages."""
        rendered = self.prompts.render(self.session, None)
        logged = []
        if rendered.shown:
            logged = self.session.messages(after=min(rendered.shown) - 1)
        originals = [(digest(m.message), chat_to_langchain(m.message)) for m in logged]
        return to_langchain(rendered.messages, originals)

    def recall_tools(self, *, max_tokens: int = 2000) -> list[BaseTool]:
        """The recall tools as LangChain tools over this session's view (its newest branch,
        as ``messages`` reads); each answer is at most ``max_tokens`` long."""
        tools = RecallTools(self.session, self.prompts.view, max_tokens=max_tokens)
        return bound_tools(tools.bound())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Log the messages in one append, after the newest message."""
        self.session.extend([langchain_to_chat(m, index=i) for i, m in enumerate(messages)])

    def clear(self) -> None:
        """Delete the session whole (log, views, folds) and open it afresh, with its system prompt."""
        self.memory.delete_session(self.session.id)
        self.session = self.memory.session(self.session.id, system=self.system)
