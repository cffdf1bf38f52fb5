"""Each library of ``bench/peers.py`` behind one small interface: append, then ask for the prompt.

Every driver keeps the system prompt where its library's documentation puts
it: beside the memory for LangChain's agent middleware (``create_agent``'s
``system_prompt``) and LlamaIndex (the agent prepends it; the summary buffer
takes its tokens as ``initial_token_count``), inside the message list for
``trim_messages`` (``include_system=True``) and langmem (it keeps a leading
system message), and as the session's first message for contextfold.
``system_in_history`` puts it first among the memory's own messages instead,
as a caller with an OpenAI-format history would. Each is given the whole
budget by its own knob and counts with contextfold's counter: a summarizer's
trigger is the room beside a system prompt kept apart (the whole budget when
it is in the history), and keeps 0.7 of it after a summary where it takes a
size (contextfold's low-water default).

``prompt()`` returns the library's own prompt object; ``openai()`` turns it
into OpenAI-format messages, outside any timing, for the checks.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from _peers_model import (
    ContextfoldScripted,
    LangChainScripted,
    LlamaIndexScripted,
    ScriptedSummarizer,
)
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import (
    BaseMessage,
    SystemMessage,
    convert_to_messages,
    convert_to_openai_messages,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately
from langmem.short_term import RunningSummary, summarize_messages
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import ChatSummaryMemoryBuffer
from llama_index.core.memory import Memory as LlamaMemory
from llama_index.core.memory.memory_blocks import FactExtractionMemoryBlock

from contextfold import Memory, ThreadRunner, TokenCounter
from contextfold.core.messages import Message

KEEP_SHARE = 0.7


def clean(message: Message) -> dict[str, Any]:
    """What is sent of a logged message: no ``meta``, text content."""
    out = {k: v for k, v in message.items() if k != "meta"}
    if out.get("content") is None:
        out["content"] = ""
    return out


class Driver(ABC):
    """One library's memory over one conversation, under one budget."""

    name = ""
    system_apart = False  # the library's documented place for the system prompt is beside it
    # Why the library's own default token counter is not measured too (None: it is).
    no_default_counter: str | None = "n/a: its counter is the shared one"

    def __init__(
        self,
        system: str | None,
        budget: int,
        summarizer: ScriptedSummarizer,
        counter: TokenCounter,
        *,
        background: bool = False,
        system_in_history: bool = False,
        default_counter: bool = False,
    ) -> None:
        self.default_counter = default_counter
        self.background = background
        self.in_history = system_in_history
        self.system = system
        self.budget = budget
        self.summarizer = summarizer
        self.counter = counter
        system_tokens = counter.messages([{"role": "system", "content": system}] if system else [])
        self.room = budget if system_in_history else max(1, budget - system_tokens)

    def prefill(self, messages: Sequence[Message]) -> None:
        for message in messages:
            self.append(message)

    @abstractmethod
    def append(self, message: Message) -> None:
        """Add one logged message."""

    @abstractmethod
    def prompt(self) -> Any:
        """The prompt for the next model call, as the library gives it."""

    def openai(self, prompt: Any) -> list[dict[str, Any]]:
        return list(prompt)

    def settle(self) -> None:  # noqa: B027 (a hook: only contextfold works in the background)
        """Let work the library does in the background finish (contextfold's runner)."""

    def close(self) -> None:  # noqa: B027 (a hook: most drivers start nothing)
        """Stop what the driver started."""


class Contextfold(Driver):
    """A contextfold view; ``background`` folds on a ThreadRunner, else inline before render."""

    preset = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        memory = Memory(encoding=self.counter.name)
        self.session = memory.session("peers", system=self.system)
        llm = ContextfoldScripted(self.summarizer) if self.preset == "chat" else None
        self.view = self.session.view("v", preset=self.preset, budget=self.budget, llm=llm)
        self.runner: ThreadRunner | None = ThreadRunner() if self.background else None
        if self.runner is not None:
            self.runner.watch(self.view)

    def prefill(self, messages: Sequence[Message]) -> None:
        self.session.extend([clean(m) for m in messages])

    def append(self, message: Message) -> None:
        self.session.append(clean(message))

    def prompt(self) -> list[Message]:
        if self.runner is None:
            self.view.compact()
        return self.view.render()

    def settle(self) -> None:
        if isinstance(self.runner, ThreadRunner):
            self.runner.wait_idle(60)

    def close(self) -> None:
        if isinstance(self.runner, ThreadRunner):
            self.runner.stop(timeout=10, drain=False)


class ContextfoldChat(Contextfold):
    name = "contextfold chat"
    preset = "chat"


class ContextfoldOffline(Contextfold):
    name = "contextfold offline"
    preset = "offline"


def langchain_counter(counter: TokenCounter) -> Callable[[Sequence[BaseMessage]], int]:
    """contextfold's count of LangChain messages, as they would be sent."""
    return lambda messages: counter.messages(convert_to_openai_messages(list(messages)))


class LangChain(Driver):
    """A LangChain message list; the system prompt kept by ``system_first``."""

    system_first = True
    no_default_counter = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.count = (
            count_tokens_approximately if self.default_counter else langchain_counter(self.counter)
        )
        self.model = LangChainScripted(summarizer=self.summarizer)
        self.messages: list[BaseMessage] = []
        if self.system and (self.system_first or self.in_history):
            self.messages.append(SystemMessage(content=self.system, id="system"))

    def append(self, message: Message) -> None:
        (converted,) = convert_to_messages([clean(message)])
        converted.id = f"m{len(self.messages)}"
        self.messages.append(converted)

    def openai(self, prompt: Any) -> list[dict[str, Any]]:
        return list(convert_to_openai_messages(list(prompt)))


class SummarizationMiddlewareDriver(LangChain):
    """``SummarizationMiddleware.before_model`` on the agent's state, as ``create_agent`` calls it."""

    name = "LangChain SummarizationMiddleware"
    system_first = False
    system_apart = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.middleware = SummarizationMiddleware(
            model=self.model,
            trigger=("tokens", self.room),
            keep=("tokens", int(self.room * KEEP_SHARE)),
            token_counter=self.count,
        )

    def prompt(self) -> list[BaseMessage]:
        update = self.middleware.before_model({"messages": self.messages}, None)  # type: ignore[arg-type]
        if update is not None:
            self.messages = list(update["messages"][1:])  # after RemoveMessage(REMOVE_ALL)
        system = [SystemMessage(content=self.system)] if self.system and not self.in_history else []
        return system + self.messages


class TrimMessagesDriver(LangChain):
    """``trim_messages`` with the settings LangChain's docs give for chat history."""

    name = "LangChain trim_messages"

    def prompt(self) -> list[BaseMessage]:
        return trim_messages(
            self.messages,
            max_tokens=self.budget,
            token_counter=self.count,
            strategy="last",
            include_system=True,
            start_on="human",
            end_on=("human", "tool"),
        )


class LangmemDriver(LangChain):
    """langmem's ``summarize_messages`` over the whole list with its running summary."""

    name = "langmem summarize_messages"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.running: RunningSummary | None = None

    def prompt(self) -> list[BaseMessage]:
        result = summarize_messages(
            self.messages,
            running_summary=self.running,
            model=self.model,
            max_tokens=self.budget,
            token_counter=self.count,
        )
        self.running = result.running_summary
        return list(result.messages)


class Tokens:
    """contextfold's text count as LlamaIndex's ``tokenizer_fn`` (it takes ``len`` of the result)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

    def __call__(self, text: str) -> range:
        return range(self.counter.text(text))


def to_llama(message: Message) -> ChatMessage:
    kwargs = {k: message[k] for k in ("tool_calls", "tool_call_id", "name") if message.get(k)}
    return ChatMessage(
        role=message["role"], content=message.get("content") or "", additional_kwargs=kwargs
    )


def from_llama(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": str(message.role.value), "content": message.content or ""}
    out.update(
        {
            k: v
            for k, v in message.additional_kwargs.items()
            if k in ("tool_calls", "tool_call_id", "name")
        }
    )
    return out


class LlamaIndex(Driver):
    system_apart = True
    no_default_counter = "n/a: its default tokenizer downloads tiktoken's file"

    def openai(self, prompt: Any) -> list[dict[str, Any]]:
        messages = [from_llama(m) for m in prompt]
        if not self.system or self.in_history:
            return messages
        if messages and messages[0]["role"] == "system":
            # LlamaIndex's agents put their system prompt first in a system message they find.
            first = {"role": "system", "content": f"{self.system}\n{messages[0]['content']}"}
            return [first, *messages[1:]]
        return [{"role": "system", "content": self.system}, *messages]


class ChatSummaryMemoryBufferDriver(LlamaIndex):
    name = "LlamaIndex ChatSummaryMemoryBuffer"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memory = ChatSummaryMemoryBuffer.from_defaults(
            llm=LlamaIndexScripted(summarizer=self.summarizer),
            token_limit=self.budget,
            tokenizer_fn=Tokens(self.counter),
            count_initial_tokens=True,
        )
        self.initial = self.budget - self.room
        self.first = (
            [to_llama({"role": "system", "content": self.system})]
            if self.in_history and self.system
            else []
        )
        self.memory.set(list(self.first))

    def prefill(self, messages: Sequence[Message]) -> None:
        self.memory.set([*self.first, *[to_llama(m) for m in messages]])

    def append(self, message: Message) -> None:
        self.memory.put(to_llama(message))

    def prompt(self) -> list[ChatMessage]:
        return self.memory.get(initial_token_count=self.initial)


class LlamaMemoryDriver(LlamaIndex):
    """``Memory`` with a fact-extraction block on the scripted model (its model-based use)."""

    name = "LlamaIndex Memory"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loop = asyncio.new_event_loop()
        block = FactExtractionMemoryBlock(
            name="facts", llm=LlamaIndexScripted(summarizer=self.summarizer)
        )
        self.memory = LlamaMemory.from_defaults(
            session_id="peers",
            token_limit=self.room,
            tokenizer_fn=Tokens(self.counter),
            memory_blocks=[block],
        )
        if self.in_history and self.system:
            self.append({"role": "system", "content": self.system})

    def prefill(self, messages: Sequence[Message]) -> None:
        self.loop.run_until_complete(self.memory.aput_messages([to_llama(m) for m in messages]))

    def append(self, message: Message) -> None:
        self.loop.run_until_complete(self.memory.aput(to_llama(message)))

    def prompt(self) -> list[ChatMessage]:
        return self.loop.run_until_complete(self.memory.aget())

    def close(self) -> None:
        self.loop.close()


DRIVERS: tuple[type[Driver], ...] = (
    ContextfoldChat,
    ContextfoldOffline,
    SummarizationMiddlewareDriver,
    TrimMessagesDriver,
    LangmemDriver,
    ChatSummaryMemoryBufferDriver,
    LlamaMemoryDriver,
)
