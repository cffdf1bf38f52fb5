"""A LlamaIndex memory over a contextfold session: raw log in, compacted view out.

LlamaIndex agents (``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``) keep
their conversation in a ``BaseMemory``: ``aput`` the user's message, ``aget``
the history before each model call, ``aput_messages`` the run's tool calls,
results and answer when it ends, ``aset`` a ``chat_history`` given to ``run``.
``ContextfoldMemory`` logs what is put (each message once) and hands back the
view's prompt: folds and recent messages within the view's budget, tool calls
never parted from their results. The raw conversation stays whole in the log
(``get_all``). It folds nothing itself: whatever compacts the view (a runner
watching it, ``view.compact()``, a worker) does, off the agent's turn.

The memory follows one branch of the log. It starts on the newest; a write
moves it to the message written; ``set`` with a list that edits or drops part
of the conversation starts a branch (``Session.record``) and follows it;
``reset`` starts an empty branch after the system prompt, so the memory is
empty again and the old conversation stays in the log as its own branch
(``Session.branches()``). Nothing logged is ever changed or lost.

The model's prompt is the memory's messages plus what the agent adds: its
``system_prompt`` (keep it in the session instead, ``system=``, so it is
logged, counted and pinned) and the current run's tool steps, which LlamaIndex
keeps outside the memory until the run ends.

``recall_tools()`` gives the agent the recall tools (``contextfold_search``,
``contextfold_expand``, ``contextfold_folds``) as LlamaIndex ``FunctionTool``s:
``FunctionAgent(tools=[*tools, *memory.recall_tools()], ...)``. They read this
memory's session only, on the memory's branch as it is when the model calls them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from contextfold.core.errors import InvalidInput
from contextfold.core.extras import needs_extra
from contextfold.core.messages import Message
from contextfold.integrations.agent_views import agent_view_settings
from contextfold.integrations.llama_index.messages import (
    CallsIn,
    calls_in_of,
    from_llama_index,
    stored_calls_in,
    to_llama_index,
)
from contextfold.memory.matching import digest
from contextfold.memory.recall_tools import BoundRecallTool, RecallTools
from contextfold.memory.session import Memory, Session

with needs_extra("the LlamaIndex adapter", "llama-index"):
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, PrivateAttr
    from llama_index.core.memory.types import BaseMemory
    from llama_index.core.tools import FunctionTool, ToolMetadata


class ContextfoldMemory(BaseMemory):
    """A ``BaseMemory`` whose history is a contextfold session and whose ``get`` is a view.

    ::

        memory = ContextfoldMemory.from_defaults(
            Memory("agent.db"), "user-42", system="You are a careful agent.",
            view="default", preset="offline", budget=8000,
        )
        agent = FunctionAgent(tools=[...], llm=llm)
        await agent.run("hi", memory=memory)

    The async methods are ``BaseMemory``'s: each runs its sync twin on a
    thread, so a store's I/O never blocks the agent's event loop.
    """

    session_id: str
    view_name: str = "default"
    budget: int | None = None
    """Tokens ``get`` may hand back; None: the view's own budget."""
    tool_calls_in: CallsIn | None = None
    """Where messages built by the view (a fold keeping tool calls) carry their calls;
    None: as the messages this memory has seen do (the LLM class's own way)."""

    _session: Session = PrivateAttr()
    _head: int | None = PrivateAttr(default=None)
    _seen_calls_in: CallsIn = PrivateAttr(default="blocks")

    def __init__(
        self,
        session: Session,
        *,
        view: str = "default",
        budget: int | None = None,
        tool_calls_in: CallsIn | None = None,
    ) -> None:
        if not isinstance(session, Session):
            raise InvalidInput(
                f"session must be a contextfold Session, not {type(session).__name__}",
                field="session",
            )
        if budget is not None and (type(budget) is not int or budget <= 0):
            raise InvalidInput(f"budget must be a positive int, not {budget!r}", field="budget")
        if tool_calls_in not in (None, "blocks", "additional_kwargs"):
            raise InvalidInput(
                "tool_calls_in is 'blocks', 'additional_kwargs' or None", field="tool_calls_in"
            )
        session.view(view)  # checks the name before anything else uses it
        fields: dict[str, Any] = {
            "session_id": session.id,
            "view_name": view,
            "budget": budget,
            "tool_calls_in": tool_calls_in,
        }
        super().__init__(**fields)  # pydantic's fields, which mypy does not see on BaseMemory
        self._session = session

    @classmethod
    def class_name(cls) -> str:
        return "ContextfoldMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        memory: Memory,
        session_id: str,
        *,
        system: str | None = None,
        view: str = "default",
        budget: int | None = None,
        tool_calls_in: CallsIn | None = None,
        **view_settings: Any,
    ) -> ContextfoldMemory:
        """Open (or create) the session and the view (``tool_calls_in``: see the field);
        ``view_settings`` (``preset``,
        ``budget``, ``model``, ...) are stored with the view as ``Session.view`` does; a
        ``model`` without a ``preset`` folds with the agent's default, ``task-state``.
        ``budget`` is stored as the view's budget, the one ``get`` fits."""
        if not isinstance(memory, Memory):
            raise InvalidInput(
                f"memory must be a contextfold Memory, not {type(memory).__name__}",
                field="memory",
            )
        session = memory.session(session_id, system=system)
        if view_settings or budget is not None:
            session.view(view, budget=budget, **agent_view_settings(view_settings))
        return cls(session, view=view, tool_calls_in=tool_calls_in)

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> ContextfoldMemory:
        """Rebuild a memory from ``to_dict()`` (what a serialized workflow context keeps:
        the session id and the settings, not the store), given the store as ``memory=``."""
        memory = kwargs.get("memory")
        if not isinstance(memory, Memory):
            raise InvalidInput(
                "a ContextfoldMemory is rebuilt over its store: "
                "ContextfoldMemory.from_dict(data, memory=Memory(...))",
                field="memory",
            )
        if not isinstance(data, dict) or not isinstance(data.get("session_id"), str):
            raise InvalidInput("data is a ContextfoldMemory's to_dict()", field="session_id")
        return cls(
            memory.session(data["session_id"]),
            view=data.get("view_name", "default"),
            budget=data.get("budget"),
            tool_calls_in=data.get("tool_calls_in"),
        )

    @property
    def session(self) -> Session:
        """The contextfold session this memory logs to."""
        return self._session

    @property
    def head(self) -> int | None:
        """The seq this memory's branch ends at; None: the newest message's branch."""
        return self._head

    def recall_tools(self, *, max_tokens: int = 2000) -> list[FunctionTool]:
        """The recall tools as LlamaIndex tools, bound to this memory's session, its view
        and its branch; each answer is at most ``max_tokens`` long."""
        tools = RecallTools(self._session, self.view_name, max_tokens=max_tokens)
        return [_function_tool(tool) for tool in tools.bound(lambda: self._head)]

    # -- reads --------------------------------------------------------------

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The view's prompt for this memory's branch; ``input`` (the user's message, as
        agents pass it) is what recall, when the view has it on, searches the log for."""
        if self._head == 0:
            return []
        view = self._session.view(self.view_name)
        rendered = view.render_report(self.budget, query=input or None, branch=self._head)
        logged = self._logged(rendered.shown)
        for kept in logged.values():  # the agent's own messages, newest last
            self._seen_calls_in = stored_calls_in(kept) or self._seen_calls_in
        calls_in = self.tool_calls_in or self._seen_calls_in
        out: list[ChatMessage] = []
        for message in rendered.messages:
            native = logged.get(digest(message))
            out.append(to_llama_index(message if native is None else native, calls_in=calls_in))
        return out

    def get_all(self) -> list[ChatMessage]:
        """This memory's branch as logged, never folded."""
        if self._head == 0:
            return []
        return [to_llama_index(m) for m in self._session.history(branch=self._head)]

    # -- writes -------------------------------------------------------------

    def put(self, message: ChatMessage) -> None:
        """Log one message at the end of this memory's branch."""
        self.put_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Log messages at the end of this memory's branch, all or none.

        Matched first against what the log holds at that place
        (``Session.record``), so messages a retry or a second process already
        logged there are not logged again. At the conversation's start (nothing
        but the system prompt on the branch yet) the messages are matched as a
        whole conversation: a leading system message equal to the session's is
        the session's, not a second one.
        """
        batch = [from_llama_index(m, index=i) for i, m in enumerate(messages)]
        if not batch:
            return
        for message in messages:
            self._saw(message)
        end = self._session.last_seq() if self._head is None else self._head
        if end <= self._system_end():
            self._head = self._session.record(batch).at
        else:
            self._head = self._session.record(batch, after=end).at

    def set(self, messages: list[ChatMessage]) -> None:
        """Make ``messages`` this memory's whole conversation: what the log holds of it
        is matched, not logged again; what is new is logged after it; a list that
        departs from the log starts a branch. An empty list is ``reset``."""
        batch = [from_llama_index(m, index=i) for i, m in enumerate(messages)]
        if not batch:
            self.reset()
            return
        self._head = self._session.record(batch).at

    def reset(self) -> None:
        """Start an empty branch after the session's system prompt: the next message put
        begins a new conversation; the old one stays logged as its own branch."""
        self._head = self._system_end()

    def _saw(self, message: ChatMessage) -> None:
        """Follow the way the agent's messages carry tool calls."""
        self._seen_calls_in = calls_in_of(message) or self._seen_calls_in

    def _system_end(self) -> int:
        """The seq of the log's last leading system message, 0 when it has none."""
        return self._session.system_end()

    def _logged(self, shown: Sequence[int]) -> dict[bytes, Message]:
        """The logged messages the prompt shows, with their ``meta``, by the digest of what
        a model sees (a rendered raw message has its logged one's; a clipped one has
        not): read from the first shown seq on, not the whole log."""
        if not shown:
            return {}
        wanted = set(shown)
        page = self._session.messages(after=min(wanted) - 1, branch=self._head)
        return {digest(m.message): m.message for m in page if m.seq in wanted}


def _function_tool(tool: BoundRecallTool) -> FunctionTool:
    """``tool`` as a LlamaIndex ``FunctionTool``: its JSON schema as the tool's ``fn_schema``,
    its store reads on a thread when the agent awaits it."""
    parameters = tool.parameters

    class Arguments(BaseModel):
        """The tool's arguments, passed through as the model gave them (``answer`` checks them
        and words a mistake for the model)."""

        model_config = ConfigDict(extra="allow")

        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return dict(parameters)

    def call(**arguments: Any) -> str:
        return tool.call(arguments)

    async def acall(**arguments: Any) -> str:
        return await asyncio.to_thread(tool.call, arguments)

    metadata = ToolMetadata(name=tool.name, description=tool.description, fn_schema=Arguments)
    return FunctionTool.from_defaults(fn=call, async_fn=acall, tool_metadata=metadata)
