"""The OpenAI Agents SDK's session protocol over a contextfold view (``pip install
'contextfold[openai-agents]'``).

::

    memory = Memory("agents.db")
    memory.session("chat-1").view("default", preset="offline", budget=8000)   # the user's view
    session = ContextfoldSession.open(memory, "chat-1")
    result = await Runner.run(agent, "What changed?", session=session)

The SDK reads a session before each run and hands it the run's new items
after each turn. Here the items it reads are the view's compacted prompt of
the adapter's branch, and the items it hands over are logged, raw, once:

- ``add_items``: the Responses-API input items become log messages through
  ``contextfold.formats.responses`` (the proxy's own translation): a message
  item a message, a run of the model's items (reasoning, text, function calls)
  one assistant message, a function output a tool message; what a chat message
  cannot hold (a reasoning item, an item's id, an image's detail, an unknown
  item) rides verbatim on the message's ``meta``. Each batch is recorded after
  the branch's head (``Session.record``): a message the log already holds at
  that place, as a model sees it, is that message, so items added again where
  they were (a retry, a second process, the SDK's rewind: a pop then the same
  add) are not logged twice, and the first items logged are the ones kept.
- ``get_items``: the view rendered for the branch, as input items: a message
  shown whole comes back as the very items that made it, a fold or a clipped
  message as a message item written from its text.
- ``pop_item``: the log is append-only, so popping moves the adapter's head
  back. The newest item is returned; when its message made several items (a
  model's run), the others stay on the branch, unlogged, until the next add
  logs them with its items after the head: adding back what was popped finds
  the same message at the same place, and logs nothing. The session's system
  prompt (the log's leading system messages) is never popped.
- ``clear_session``: the SDK promises that a cleared session reads empty and
  the next run starts afresh. Here the head moves back to the system prompt,
  so the next add starts a branch there; nothing logged is deleted (the views,
  their folds and settings stay). ``Memory.delete_session`` removes a session
  whole.

The head follows the newest message's branch, as a shared conversation does,
until ``pop_item``, ``clear_session`` or ``branch=`` pins it; an add that
extends the newest message follows it again. The pin is this object's: another
process opening the session reads the newest branch.

Compaction is not the adapter's: a runner watching the view (or
``View.compact``) folds it; the adapter only logs and renders.

``recall_tools()`` gives the agent the recall tools (``contextfold_search``,
``contextfold_expand``, ``contextfold_folds``) as the SDK's own function tools:
``Agent(..., tools=[*session.recall_tools()])``. They read this session only,
on the adapter's branch as it is when the model calls them.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from contextfold.core.errors import BudgetError, InvalidInput
from contextfold.core.extras import needs_extra
from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, for_model
from contextfold.formats.responses import KEPT, Item, read_items, write_items
from contextfold.memory.kept import KeptMeta, with_kept
from contextfold.memory.recall_tools import BoundRecallTool, RecallTools
from contextfold.memory.session import Memory, Session

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.run_config import CallModelData, ModelInputData
    from agents.tool import FunctionTool
    from agents.tool_context import ToolContext

EXTRA = "openai-agents"
_PLACE = re.compile(r"input\[(\d+)\]\.?(.*)")


class ContextfoldSession:
    """A session of the OpenAI Agents SDK whose items are a contextfold view's prompt and
    whose writes go to the log (module docstring)."""

    session_settings: SessionSettings | None

    def __init__(
        self,
        session: Session,
        view: str = "default",
        *,
        branch: int | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        with needs_extra("the OpenAI Agents SDK session", EXTRA):
            import agents.memory  # noqa: F401  (the SDK this class serves)
        if not isinstance(session, Session):
            raise InvalidInput(
                f"session must be a contextfold Session, not {type(session).__name__}",
                field="session",
            )
        if not isinstance(view, str) or not view:
            raise InvalidInput(f"view must be a view name, not {view!r}", field="view")
        if branch is not None and (type(branch) is not int or branch < 0):
            raise InvalidInput(f"branch must be a seq (0 or more), not {branch!r}", field="branch")
        if branch is not None and branch > session.last_seq():
            raise InvalidInput(f"branch {branch} is not a message of the log", field="branch")
        self.session = session
        self.session_id = session.id
        self.view = session.view(view)
        self.session_settings = session_settings
        self._head = branch
        self._rest: list[Item] = []
        """Items of a message a pop split, after the head, not logged again yet."""
        self._kept = KeptMeta()
        self._lock = threading.Lock()
        # What the SDK holds of this session during a run: the items it last read, and
        # the items added since (``call_model_input_filter`` compares a call with them).
        self._read: list[Item] | None = None
        self._since: list[Any] = []

    @classmethod
    def open(
        cls,
        memory: Memory,
        session_id: str,
        view: str = "default",
        *,
        branch: int | None = None,
        session_settings: SessionSettings | None = None,
    ) -> ContextfoldSession:
        """The adapter over ``memory``'s session ``session_id`` (created if new)."""
        if not isinstance(memory, Memory):
            raise InvalidInput(
                f"memory must be a contextfold Memory, not {type(memory).__name__}",
                field="memory",
            )
        return cls(
            memory.session(session_id), view, branch=branch, session_settings=session_settings
        )

    @property
    def head(self) -> int:
        """The seq of the branch's last message (0: nothing on it yet)."""
        with self._lock:
            return self._branch()

    # -- the SDK's protocol: each call runs on a thread, the store's calls block ----------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The view's prompt for the branch as input items; with ``limit``, its last ones."""
        wanted = self._limit(limit)
        items = await asyncio.to_thread(self.items, wanted)
        with self._lock:
            self._read, self._since = items, []
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Log the items after the branch's head, once (module docstring)."""
        await asyncio.to_thread(self.add, items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Move the head back past the newest item and return it (None: nothing to pop)."""
        popped = await asyncio.to_thread(self.pop)
        return cast("TResponseInputItem | None", popped)

    async def clear_session(self) -> None:
        """Start an empty branch after the system prompt; nothing logged is deleted."""
        await asyncio.to_thread(self.clear)

    async def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """Every model call of a run sent the view's prompt, not only the run's first.

        Give it as ``RunConfig(call_model_input_filter=session.call_model_input_filter)``.
        The SDK reads the session once a run and puts the run's own items (tool
        calls and results) on top, so a long run outgrows the budget. A call's
        input is the items read, those added since (now in the log) and those
        not added yet (a streamed run adds its input after the first call): it
        is sent as the view's prompt of the branch, rendered within the budget
        less what the items not added yet cost, then those items. A call whose
        input is not that (a ``session_input_callback`` changed the history)
        is sent unchanged.
        """
        return await asyncio.to_thread(self.model_input, data)

    def recall_tools(self, *, max_tokens: int = 2000) -> list[FunctionTool]:
        """The recall tools as the SDK's function tools, bound to this session, its view
        and the adapter's branch; each answer is at most ``max_tokens`` long."""
        from agents.tool import FunctionTool

        bound = RecallTools(self.session, self.view.name, max_tokens=max_tokens).bound(self._pinned)
        return [
            FunctionTool(
                name=tool.name,
                description=tool.description,
                params_json_schema=tool.parameters,
                on_invoke_tool=_invoker(tool),
                strict_json_schema=False,  # optional fields: the schemas are not strict
            )
            for tool in bound
        ]

    # -- the same, blocking ----------------------------------------------------------------

    def items(self, limit: int | None = None) -> list[Item]:
        """``get_items``, blocking."""
        wanted = self._limit(limit)
        if wanted == 0:
            return []
        with self._lock:
            items = [*write_items(self._prompt(self._branch(), None)), *self._rest]
        return items if wanted is None else items[-wanted:]

    def add(self, items: Sequence[Mapping[str, Any]]) -> list[LoggedMessage]:
        """``add_items``, blocking: the messages this call logged (none when the log held
        them all at the head already)."""
        if not isinstance(items, Sequence) or isinstance(items, str | bytes):
            raise InvalidInput(f"items must be a list, not {type(items).__name__}", field="items")
        _read(items)  # checked before the lock: an error names the caller's item
        with self._lock:
            messages = _read([*self._rest, *items])
            if not messages:
                return []
            head = self._branch()
            # On a branch holding nothing past the system prompt, the batch is matched
            # from the log's start, so a system item equal to the prompt is the prompt.
            after = None if head <= self._system_count() else head
            recorded = self.session.record(messages, after=after)
            self._rest = []
            self._settle(recorded.at)
            self._since += items
        return recorded.logged

    def model_input(self, data: CallModelData[Any]) -> ModelInputData:
        """``call_model_input_filter``, blocking."""
        from agents.run_config import ModelInputData

        given = data.model_data
        with self._lock:
            read, since = self._read, list(self._since)
        pending = None if read is None else _pending(given.input, read, since)
        if pending is None:
            return given
        items, messages = pending
        budget = self.view.budget
        if budget is not None:
            spent = sum(self.session.counter.message(m) for m in messages)
            budget = max(budget - spent, 1)
        with self._lock:
            head = self._branch()
            try:
                prompt = self._prompt(head, budget)
            except BudgetError:  # the items not added yet leave too little: the view's own
                prompt = self._prompt(head, None)
            sent = [*write_items(prompt), *self._rest, *items]
        return ModelInputData(
            input=cast("list[TResponseInputItem]", sent), instructions=given.instructions
        )

    def pop(self) -> Item | None:
        """``pop_item``, blocking."""
        with self._lock:
            if self._rest:
                return self._rest.pop()
            head = self._branch()
            if head <= self._system_count():
                return None
            record = self.session.messages(after=head - 1, limit=1)[0]
            items = write_items([_with_items(record)])
            self._head = head - 1 if record.parent is None else record.parent
            self._rest = items[:-1]
            return items[-1]

    def clear(self) -> None:
        """``clear_session``, blocking."""
        with self._lock:
            self._head = self._system_count()
            self._rest = []

    # -- inside ---------------------------------------------------------------------------

    def _prompt(self, head: int, budget: int | None) -> list[Message]:
        """The view's prompt of the branch ending at ``head``, its logged messages with
        the items they keep (``budget``: None for the view's own)."""
        if head == 0:
            return []
        rendered = self.view.render_report(budget, branch=head)
        last = head if self._head is None else self.session.last_seq()
        kept = self._kept.of(self.session, last, KEPT)
        return with_kept(rendered, kept, KEPT, self._system_count())

    def _limit(self, limit: int | None) -> int | None:
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidInput(f"limit must be 0 or more, not {limit!r}", field="limit")
        return limit

    def _pinned(self) -> int | None:
        """The branch the recall tools read: the pinned head, or None for the newest."""
        with self._lock:
            return self._head

    def _branch(self) -> int:
        """The head: pinned, or the newest message's."""
        return self.session.last_seq() if self._head is None else self._head

    def _settle(self, last: int) -> None:
        """After an add ending at ``last``: follow the newest branch again if it is ours."""
        self._head = None if last == self.session.last_seq() else last

    def _system_count(self) -> int:
        """How many leading system (or developer) messages the log has: its system prompt."""
        return self.session.system_end()


def _invoker(tool: BoundRecallTool) -> Any:
    """The SDK's ``on_invoke_tool`` for ``tool``: the store's reads off the event loop."""

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        return await asyncio.to_thread(tool.call, arguments)

    return invoke


def _with_items(record: LoggedMessage) -> Message:
    """A logged message as ``write_items`` reads it: with the items it keeps, if any."""
    message = dict(record.message)
    meta = message.pop("meta", None)
    if isinstance(meta, Mapping) and KEPT in meta:
        message["meta"] = {KEPT: meta[KEPT]}
    return message


def _read(items: Sequence[Any]) -> list[Message]:
    """Input items as log messages; an error names the item by its index in ``items`` and
    the field in it (``index=3, field="call_id"``)."""
    plain = [_plain(item) for item in items]
    try:
        return read_items(plain, continued=True)
    except InvalidInput as exc:
        found = _PLACE.fullmatch(exc.field or "")
        if found is None:
            raise InvalidInput(exc.reason, field=exc.field or "items") from None
        raise InvalidInput(exc.reason, index=int(found[1]), field=found[2] or "items") from None


def _pending(
    given: Sequence[Any], read: Sequence[Item], since: Sequence[Any]
) -> tuple[list[Any], list[Message]] | None:
    """The items of a model call's input after those read and those added since, and
    their messages; None when the input does not start with those (as a model sees them)."""
    known = len(read) + len(since)
    if len(given) < known:
        return None
    try:
        if _seen(given[: len(read)]) != _seen(read):
            return None
        if _seen(given[len(read) : known]) != _seen(since):
            return None
        rest = list(given[known:])
        return rest, _read(rest)
    except InvalidInput:
        return None


def _seen(items: Sequence[Any]) -> list[Message]:
    return [for_model(m) for m in _read(items)]


def _plain(item: Any) -> Any:
    """An item as a plain dict: the SDK hands over dicts, a caller may hand pydantic models."""
    dump = getattr(item, "model_dump", None)
    if callable(dump) and not isinstance(item, Mapping):
        return dump(exclude_unset=True, mode="json")
    return item
