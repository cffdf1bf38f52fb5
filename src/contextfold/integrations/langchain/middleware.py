"""An agent middleware for LangChain v1's ``create_agent``: the graph keeps every message, the
model gets the view's compacted prompt.

::

    agent = create_agent(model, tools, system_prompt="...",
                         middleware=[ContextfoldMiddleware(memory=Memory("agents.db"), budget=8000)])
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "t1"}})

On each model call (``wrap_model_call``, and ``awrap_model_call`` for
``ainvoke``/``astream``) the state's whole conversation is recorded in the
thread's session (``Session.record``: matched against the log by what a
model sees, so a message is logged once however often LangGraph hands it
over again, and an edited or regenerated history starts a branch), the view
is compacted and rendered for that branch, and the model is called with
``request.override(messages=...)``. The state's messages are never changed:
the graph, its checkpointer and what ``invoke`` returns hold the raw
conversation. ``after_agent`` records the run's last answer, which no later
model call of the run hands over.

The system prompt is the request's own (``request.system_message``), in the
log's place: it is logged as a new session's first message, and a prompt
that changes from call to call (``@dynamic_prompt``) is sent as it is, the
view fit to the budget with it, without forking the log. The rest of the
prompt is the state's own message objects where the view shows them
verbatim, and new ones for folds and masked results (``prompts.to_langchain``).

Sessions: ``session=`` gives one fixed session; ``memory=`` opens one per
LangGraph thread, named by ``thread_session`` (a format string over
``thread_id``, or a function of it) from the run's ``configurable.thread_id``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime

from contextfold.core.errors import InvalidInput
from contextfold.core.messages import Message
from contextfold.integrations.langchain.messages import ChatMessages, langchain_to_chat
from contextfold.integrations.langchain.prompts import ViewPrompts, to_langchain
from contextfold.integrations.langchain.recall import structured_tool
from contextfold.memory.recall_tools import RecallTools, check_max_tokens, tool_definitions
from contextfold.memory.session import Memory, Session
from contextfold.runtime.core import Runner

ThreadSession = str | Callable[[str], str]
"""How a LangGraph ``thread_id`` names its session: ``"lc/{thread_id}"`` or a function."""

_Result = ModelResponse[Any] | AIMessage | Any
_KEPT = 10_000  # sessions whose recall tools and branch are kept per middleware


class ContextfoldMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Hands the model the view's compacted prompt and keeps the graph's state raw.

    ``view`` names the view and ``settings`` its stored settings (preset,
    budget, model, ...; stored on first use in this process, only those that
    differ change; a model without a preset folds with the agent's default,
    ``task-state``). ``budget`` is the render budget (None: the view's).
    Without ``runner`` the view is compacted inline before each model call; a
    contextfold runner (``ThreadRunner``, ``AsyncioRunner``, ...) compacts it
    in the background instead, and the call renders the folds committed so far.
    ``recall_tools`` adds the recall tools to the agent (``contextfold_search``,
    ``contextfold_expand``, ``contextfold_folds``: ``memory.recall_tools``), each
    reading the run's own session only, on the branch its last model call recorded;
    each answer is at most ``recall_max_tokens`` long.
    """

    def __init__(
        self,
        *,
        memory: Memory | None = None,
        session: Session | None = None,
        thread_session: ThreadSession = "{thread_id}",
        view: str = "default",
        budget: int | None = None,
        settings: Mapping[str, Any] | None = None,
        runner: Runner | None = None,
        recall_tools: bool = False,
        recall_max_tokens: int = 2000,
    ) -> None:
        super().__init__()
        if (memory is None) == (session is None):
            raise InvalidInput("give one of memory= and session=", field="session")
        if memory is not None and not isinstance(memory, Memory):
            raise InvalidInput("memory must be a contextfold Memory", field="memory")
        if session is not None and not isinstance(session, Session):
            raise InvalidInput("session must be a contextfold Session", field="session")
        if not (callable(thread_session) or isinstance(thread_session, str)):
            raise InvalidInput(
                "thread_session is a format string over {thread_id} or a function",
                field="thread_session",
            )
        self.memory = memory
        self.session = session
        self.thread_session = thread_session
        self.prompts = ViewPrompts(view, budget, settings or {}, runner, agent=True)
        self.chats = ChatMessages()
        if not isinstance(recall_tools, bool):
            raise InvalidInput("recall_tools must be True or False", field="recall_tools")
        check_max_tokens(recall_max_tokens, "recall_max_tokens")
        self.recall_max_tokens = recall_max_tokens
        self._recall: dict[str, RecallTools] = {}  # by session id: each keeps its folds read
        self._at: dict[str, int] = {}  # by session id: the branch its last model call recorded
        self._lock = threading.Lock()
        self.tools = (
            [
                structured_tool(d["function"], self._recall_answerer(d["function"]["name"]))
                for d in tool_definitions()
            ]
            if recall_tools
            else []
        )

    # -- hooks ------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], _Result]
    ) -> _Result:
        """Record the request's conversation, then call the model with the view's prompt."""
        return handler(self._compacted(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[_Result]],
    ) -> _Result:
        """``wrap_model_call``'s twin: the store and a summarizer run off the event loop."""
        return await handler(await asyncio.to_thread(self._compacted, request))

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record the run's end: its last answer is handed to no later model call of the run."""
        self._record(self.session_for(runtime), state["messages"])
        return None

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """``after_agent``'s twin, off the event loop."""
        await asyncio.to_thread(self.after_agent, state, runtime)
        return None

    # -- the work -----------------------------------------------------------

    def session_for(self, runtime: Runtime[Any] | None) -> Session:
        """The fixed session, or the one the run's LangGraph thread names (opened, or created)."""
        if self.session is not None:
            return self.session
        assert self.memory is not None
        thread = _thread_id(runtime)
        name = (
            self.thread_session.format(thread_id=thread)
            if isinstance(self.thread_session, str)
            else self.thread_session(thread)
        )
        if not isinstance(name, str):
            raise InvalidInput("thread_session gave no session id string", field="thread_session")
        return self.memory.session(name)

    def _recall_answerer(self, name: str) -> Callable[[dict[str, Any]], str]:
        """Answers recall tool ``name`` over the run's session, on that session's branch."""

        def answer(arguments: dict[str, Any]) -> str:
            session = self.session_for(None)
            with self._lock:
                tools = self._recall.get(session.id)
                if tools is None:
                    if len(self._recall) > _KEPT:
                        self._recall.clear()
                    tools = RecallTools(
                        session, self.prompts.view, max_tokens=self.recall_max_tokens
                    )
                    self._recall[session.id] = tools
                branch = self._at.get(session.id)
            return tools.on(branch).answer(name, arguments)

        return answer

    def _compacted(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        session = self.session_for(request.runtime)
        system = request.system_message
        system_chat = None if system is None else langchain_to_chat(system)
        seen, at, logged_system = self._record(session, request.messages, system_chat)
        with self._lock:
            if len(self._at) > _KEPT:
                self._at.clear()
            self._at[session.id] = at
        tokens = 0 if system_chat is None else session.counter.message(system_chat)
        rendered = self.prompts.render(session, at, system=tokens).messages
        if system is not None and logged_system:
            rendered = rendered[1:]  # the request's own system message goes in its place
        prompt = to_langchain(rendered, list(zip(seen, request.messages, strict=True)))
        # Every message made here is one of LangChain's own classes, the members of AnyMessage.
        return request.override(messages=cast(list[AnyMessage], prompt))

    def _record(
        self, session: Session, messages: Sequence[BaseMessage], system: Message | None = None
    ) -> tuple[list[bytes], int, bool]:
        """The messages' digests, the seq their branch ends at once recorded, and whether
        the log starts with a system prompt (render puts it first).

        The system prompt is logged only as a new session's first message: one that
        changes from call to call (a dynamic prompt) would otherwise start a branch,
        and log the conversation again, at each change.
        """
        converted = [self.chats.chat(m, index=i) for i, m in enumerate(messages)]
        chats, seen = [chat for chat, _ in converted], [d for _, d in converted]
        if system is not None and session.last_seq() == 0:
            return seen, session.record([system, *chats]).at, True
        recorded = session.record(chats)
        return seen, recorded.at, recorded.skipped > 0


def _thread_id(runtime: Runtime[Any] | None) -> str:
    """The run's ``configurable.thread_id`` (or the runtime's, with a checkpointer)."""
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if thread is None:
        try:
            thread = get_config().get("configurable", {}).get("thread_id")
        except RuntimeError:
            thread = None
    if thread is None or thread == "":
        raise InvalidInput(
            "this run has no thread_id: invoke the agent with "
            "config={'configurable': {'thread_id': ...}}, or give the middleware session=",
            field="thread_id",
        )
    return str(thread)
