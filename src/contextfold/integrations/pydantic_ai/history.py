"""Pydantic AI's history, logged to a contextfold session, and the view handed to the model.

``ContextfoldHistory`` is a capability (``Agent(..., capabilities=[history])``):
before each model request it logs the run's whole history with
``Session.record`` (each message once, whatever the run or the caller sends
again) and replaces the messages of that one request with the view's
compacted prompt of the run's branch. The run's own history is left raw, so
``result.all_messages()`` is the conversation as it happened, ready to pass
back as ``message_history``.

It is a history processor too (``ProcessHistory(history)``, the way Pydantic AI
takes one): then Pydantic AI keeps the view as the run's history, and the next
call's list starts with it. That prompt is recognised by what the model saw of
it in this process, or by the mark each message the adapter made carries in
its ``metadata`` (``MADE_KEY``: the session, and the seq the rest of the prompt
follows), so a saved view resumed anywhere logs only what follows it, never a
fold as a message.

The session of a conversation is fixed (``session=``) or chosen per run from
its context (``memory=`` with ``session_of=``, e.g. ``lambda ctx:
ctx.deps.conversation_id``). Compaction is not done here: a runner watching
the view (``InlineRunner``, ``ThreadRunner``, ...) folds it as the log grows;
render keeps every prompt within the budget meanwhile.

With ``recall_tools=True`` the capability gives the agent the recall tools
(``contextfold_search``, ``contextfold_expand``, ``contextfold_folds``) as its
own toolset: each call reads the run's session only, on the run's branch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic_ai import messages as pm
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext, Tool
from pydantic_ai.toolsets import FunctionToolset

from contextfold.core.checks import check_budget
from contextfold.core.errors import InvalidInput
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, for_model, validate_message
from contextfold.core.render import Rendered
from contextfold.integrations.pydantic_ai.mapping import MADE_KEY, ChatMemo, from_chat, to_chat
from contextfold.memory.recall_tools import RecallTools, check_max_tokens, tool_definitions
from contextfold.memory.session import Memory, Session

SessionOf = Callable[[RunContext[Any]], str]
"""Picks a run's session id from its context (its ``deps``, most often)."""

_CACHED = 20_000  # logged messages kept per processor, read again when dropped


@dataclass(frozen=True)
class _Handed:
    """The prompt last handed to a run of a session, as a model sees it, and the branch
    it renders."""

    prompt: list[Message]
    at: int


class ContextfoldHistory(AbstractCapability[Any]):
    """Logs a Pydantic AI run's messages to a session and gives each model request the
    view's prompt instead of the whole history."""

    def __init__(
        self,
        session: Session | None = None,
        view: str = "default",
        *,
        memory: Memory | None = None,
        session_of: SessionOf | None = None,
        budget: int | None = None,
        recall_tools: bool = False,
        recall_max_tokens: int = 2000,
    ) -> None:
        if (session is None) == (memory is None):
            raise InvalidInput("give a session, or a memory with session_of", field="session")
        if session is not None and not isinstance(session, Session):
            raise InvalidInput(
                f"session is a Session, not {type(session).__name__}", field="session"
            )
        if memory is not None and not isinstance(memory, Memory):
            raise InvalidInput(f"memory is a Memory, not {type(memory).__name__}", field="memory")
        if memory is not None and not callable(session_of):
            raise InvalidInput("a memory needs session_of(ctx) -> session id", field="session_of")
        if not isinstance(view, str) or not view:
            raise InvalidInput("view names a view", field="view")
        if type(recall_tools) is not bool:
            raise InvalidInput("recall_tools is True or False", field="recall_tools")
        check_max_tokens(recall_max_tokens, "recall_max_tokens")
        self.session = session
        self.view = view
        self.memory = memory
        self.session_of = session_of
        self.budget = check_budget(budget)
        self.recall_tools = recall_tools
        self.recall_max_tokens = recall_max_tokens
        self._lock = threading.Lock()
        self._recall: dict[str, RecallTools] = {}  # by session id
        self._at: dict[tuple[str, str | None], int] = {}  # a run's branch, by session and run
        self._handed: dict[str, _Handed] = {}
        self._heads: dict[tuple[str, str | None], int] = {}  # by session and run
        self._logged: dict[tuple[str, float], dict[int, LoggedMessage]] = {}
        self._memo: ChatMemo = {}
        # Pydantic AI builds its messages' serializer on first use: once, here, not in a turn.
        pm.ModelMessagesTypeAdapter.dump_python([])

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not a spec capability: it holds a session."""
        return None

    def get_toolset(self) -> FunctionToolset[Any] | None:
        """The recall tools, when asked for (``recall_tools=True``)."""
        if not self.recall_tools:
            return None
        return FunctionToolset([self._recall_tool(d["function"]) for d in tool_definitions()])

    def _recall_tool(self, definition: dict[str, Any]) -> Tool[Any]:
        name = definition["name"]

        async def recall(ctx: RunContext[Any], **arguments: Any) -> str:
            return await asyncio.to_thread(self.recall_answer, ctx, name, arguments)

        return Tool.from_schema(
            recall, name, definition["description"], definition["parameters"], takes_ctx=True
        )

    def recall_answer(self, ctx: RunContext[Any], name: str, arguments: dict[str, Any]) -> str:
        """A recall tool's JSON result, read from the run's session on the run's branch."""
        session = self.session_for(ctx)
        with self._lock:
            tools = self._recall.get(session.id)
            if tools is None:
                if len(self._recall) > _CACHED:
                    self._recall.clear()
                tools = RecallTools(session, self.view, max_tokens=self.recall_max_tokens)
                self._recall[session.id] = tools
            branch = self._at.get((session.id, ctx.run_id))
        return tools.on(branch).answer(name, arguments)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """This request gets the view; the run's history stays as it was."""
        given = list(request_context.messages)
        request_context.messages = await asyncio.to_thread(self.prompt, ctx, given)
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: pm.ModelResponse,
    ) -> pm.ModelResponse:
        """Log the answer now: a run's last answer is sent to no later request."""
        # Pydantic AI fills these unset fields right after this hook; filled now (the same
        # values) the logged answer is the one the run keeps.
        serving = request_context.model_id or request_context.model.model_id
        response.model_id = response.model_id or serving
        _fill_run_fields(response, ctx)
        await asyncio.to_thread(self.log_answer, ctx, response)
        return response

    def log_answer(self, ctx: RunContext[Any], response: pm.ModelResponse) -> None:
        """Log a model's answer after the branch its run's request rendered (runs of one
        session at once each keep their own)."""
        session = self.session_for(ctx)
        with self._lock:
            head = self._heads.pop((session.id, ctx.run_id), None)
        if head is not None:
            recorded = session.record(to_chat([response]), after=head)
            self._cache(session).update((e.seq, e) for e in recorded.logged)
            with self._lock:
                self._at[(session.id, ctx.run_id)] = recorded.at

    def __call__(
        self, ctx: RunContext[Any], messages: list[pm.ModelMessage]
    ) -> list[pm.ModelMessage]:
        """As a history processor (``ProcessHistory(history)``)."""
        return self.prompt(ctx, messages)

    def prompt(
        self, ctx: RunContext[Any], messages: Sequence[pm.ModelMessage]
    ) -> list[pm.ModelMessage]:
        """Log ``messages`` (the run's whole history) and return the view's prompt of it."""
        session = self.session_for(ctx)
        if messages and isinstance(messages[-1], pm.ModelRequest):
            # The request being sent: Pydantic AI fills these right after the processors.
            _fill_run_fields(messages[-1], ctx)
        originals: dict[str, pm.ModelMessage] = {}
        with self._lock:
            if len(self._memo) > _CACHED:
                self._memo.clear()
            memo = self._memo
        chat = to_chat(messages, originals, memo)
        after = None
        handed = self._handed.get(session.id)
        back = _handed_back(messages, session)
        if handed is not None and len(chat) > len(handed.prompt):
            shown = [for_model(validate_message(m)) for m in chat[: len(handed.prompt)]]
            if shown == handed.prompt:
                # The list goes on from the prompt handed over last time (a history
                # processor's run keeps it): only what follows it is new.
                chat, after = chat[len(handed.prompt) :], handed.at
                back = None
        if back is not None:
            # A prompt made here earlier, handed back (by another process, perhaps):
            # what follows its last made message continues the branch at ``after``.
            chat, after = to_chat(messages[back[0] :], originals, memo), back[1]
        recorded = session.record(chat, after=after)
        rendered = session.view(self.view).render_report(self.budget, branch=recorded.at)
        logged = self._cache(session)
        for entry in recorded.logged:
            logged[entry.seq] = entry
        prompt = from_chat(self._with_meta(session, rendered, logged, recorded.at), originals)
        with self._lock:
            self._handed[session.id] = _Handed(rendered.messages, recorded.at)
            if len(self._heads) > _CACHED:  # runs under ProcessHistory log no answer here
                self._heads.clear()
            if len(self._at) > _CACHED:
                self._at.clear()
            self._heads[(session.id, ctx.run_id)] = recorded.at
            self._at[(session.id, ctx.run_id)] = recorded.at
        return prompt

    def session_for(self, ctx: RunContext[Any]) -> Session:
        """The run's session: the one given, or ``session_of(ctx)`` opened in the memory."""
        if self.session is not None:
            return self.session
        assert self.memory is not None and self.session_of is not None
        session_id = self.session_of(ctx)
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInput(
                f"session_of gave {session_id!r}, not a session id", field="session_of"
            )
        return self.memory.session(session_id)

    def _cache(self, session: Session) -> dict[int, LoggedMessage]:
        """This process's copy of the session's logged messages, by seq (the log only grows)."""
        with self._lock:
            return self._logged.setdefault((session.id, session.created_at), {})

    def _with_meta(
        self, session: Session, rendered: Rendered, logged: dict[int, LoggedMessage], at: int
    ) -> list[Message]:
        """The prompt's messages, with the ``meta`` of each logged message it shows whole.

        Render sends no ``meta``; the logged messages shown whole (and the system
        prompt) are found in log order by what a model sees of them. The others
        (folds, markers, clipped messages, synthetic answers) are marked with the
        session and the seq the rest of the prompt follows on its branch: a run that
        keeps the prompt as its history (``ProcessHistory``) hands it back, and any
        process then logs only what comes after it.
        """
        whole = sorted({1, *rendered.shown} - set(rendered.clipped))
        missing = [seq for seq in whole if seq not in logged]
        if missing:
            if len(logged) > _CACHED:
                logged.clear()
                missing = whole
            first, last = missing[0], missing[-1]
            for entry in session.messages(after=first - 1, limit=last - first + 1):
                logged[entry.seq] = entry
        head = logged.get(1)
        if head is not None and head.role != "system" and 1 in whole and 1 not in rendered.shown:
            whole.remove(1)  # seq 1 is looked for as the system prompt only
        found = [logged[seq] for seq in whole if seq in logged]
        seen = [for_model(entry.message) for entry in found]
        out: list[Message] = []
        resumes: list[int | None] = []
        at_found = 0
        for message in rendered.messages:
            match = next((j for j in range(at_found, len(found)) if seen[j] == message), None)
            if match is None:
                out.append(message)
                resumes.append(None)
                continue
            entry = found[match]
            out.append({**message, "meta": entry.message.get("meta", {})})
            resumes.append(entry.parent or 0)
            at_found = match + 1
        resume = at
        for n in range(len(out) - 1, -1, -1):
            follows = resumes[n]
            if follows is None:
                out[n] = {**out[n], "meta": {MADE_KEY: {"session": session.id, "after": resume}}}
            else:
                resume = follows
        return out


def _handed_back(messages: Sequence[pm.ModelMessage], session: Session) -> tuple[int, int] | None:
    """Where a prompt this adapter made for ``session`` ends in ``messages`` (the index
    after its last made message) and the seq what follows it continues, if it does."""
    for n in range(len(messages) - 1, -1, -1):
        made = (messages[n].metadata or {}).get(MADE_KEY)
        if isinstance(made, dict) and made.get("session") == session.id:
            after = made.get("after")
            if type(after) is int and after >= 0:
                return n + 1, after
    return None


def _fill_run_fields(message: pm.ModelMessage, ctx: RunContext[Any]) -> None:
    """The run's fields of a message, where unset, as Pydantic AI fills them."""
    message.timestamp = message.timestamp or datetime.now(UTC)
    message.run_id = message.run_id or ctx.run_id
    message.conversation_id = message.conversation_id or ctx.conversation_id
