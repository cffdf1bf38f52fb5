"""One scripted summarizer for every library in ``bench/peers.py``, in each one's model type.

The summary is the same function of what a library sends: the opening words
of each line of the material, oldest first, capped at a fixed number of words,
after a pause that stands for a hosted model's latency. The material is what
sits inside contextfold's ``<history>`` tags when they are there, else every
line that is not one of the libraries' own instruction lines (so no library's
summary is filled with its prompt's wording). LlamaIndex's fact block asks
for ``<fact>`` tags and gets the same pieces in them.

Every call is logged with its start time, so a bench can tell on which turn
a library first called the model, whether in the turn or in the background.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware.summarization import DEFAULT_SUMMARY_PROMPT
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langmem.short_term.summarization import (
    DEFAULT_EXISTING_SUMMARY_PROMPT,
    DEFAULT_FINAL_SUMMARY_PROMPT,
    DEFAULT_INITIAL_SUMMARY_PROMPT,
)
from llama_index.core.llms import (
    CompletionResponse,
    CompletionResponseGen,
    CustomLLM,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.memory.chat_summary_memory_buffer import SUMMARIZE_PROMPT
from llama_index.core.memory.memory_blocks.fact import (
    DEFAULT_FACT_CONDENSE_PROMPT,
    DEFAULT_FACT_EXTRACT_PROMPT,
)

from contextfold import Completion, Usage
from contextfold.core.messages import Message, text_of
from contextfold.core.tokens import encoding
from contextfold.llm.base import HISTORY_CLOSE, HISTORY_OPEN
from contextfold.strategies.token_budget import SUMMARY_FIELD

WORDS_PER_LINE = 6
SUMMARY_WORDS = 120
_TAG = re.compile(r"</?[a-zA-Z_][^>]*>")
_WORD = re.compile(r"\S+")


def _template_lines() -> frozenset[str]:
    texts = [DEFAULT_SUMMARY_PROMPT, SUMMARIZE_PROMPT]
    texts += [p.template_str for p in (DEFAULT_FACT_EXTRACT_PROMPT, DEFAULT_FACT_CONDENSE_PROMPT)]
    for prompt in (
        DEFAULT_INITIAL_SUMMARY_PROMPT,
        DEFAULT_EXISTING_SUMMARY_PROMPT,
        DEFAULT_FINAL_SUMMARY_PROMPT,
    ):
        texts += [m.prompt.template for m in prompt.messages if hasattr(m, "prompt")]
    return frozenset(_key(line) for text in texts for line in text.splitlines() if _key(line))


def _key(line: str) -> str:
    return " ".join(_TAG.sub(" ", line).split()).lower()


INSTRUCTIONS = _template_lines()


def summary_pieces(texts: Iterable[str]) -> list[str]:
    """The opening words of each material line, in order, each a sentence; past
    ``SUMMARY_WORDS`` in all, lines evenly spread over the material (old and new alike)."""
    joined = "\n".join(texts)
    if HISTORY_OPEN in joined:
        joined = "\n".join(
            part.split(HISTORY_CLOSE, 1)[0] for part in joined.split(HISTORY_OPEN)[1:]
        )
    pieces = [
        " ".join(_WORD.findall(_TAG.sub(" ", line))[:WORDS_PER_LINE]).rstrip(".") + "."
        for line in joined.splitlines()
        if _key(line) and _key(line) not in INSTRUCTIONS
    ]
    count = max(1, SUMMARY_WORDS // WORDS_PER_LINE)
    if len(pieces) > count:
        pieces = [pieces[i * len(pieces) // count] for i in range(count)]
    return pieces or ["(nothing to summarize)"]


@dataclass
class ScriptedSummarizer:
    """The shared behaviour: a pause, then ``summary_pieces``; every call's start is logged."""

    delay_s: float = 0.0
    starts: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, texts: Sequence[str]) -> list[str]:
        with self._lock:
            self.starts.append(time.perf_counter())
        if self.delay_s:
            time.sleep(self.delay_s)
        return summary_pieces(texts)

    @property
    def calls(self) -> int:
        return len(self.starts)


class LangChainScripted(BaseChatModel):
    """The summarizer as a LangChain chat model (SummarizationMiddleware, langmem)."""

    summarizer: Any

    @property
    def _llm_type(self) -> str:
        return "contextfold-scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        pieces = self.summarizer.answer([m.text for m in messages])
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(content="\n".join(pieces)))]
        )


class LlamaIndexScripted(CustomLLM):
    """The summarizer as a LlamaIndex LLM (ChatSummaryMemoryBuffer, Memory's fact block)."""

    summarizer: Any

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="contextfold-scripted", is_chat_model=False)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        pieces = self.summarizer.answer([prompt])
        if "<fact>" in prompt:
            return CompletionResponse(
                text="<facts>" + "".join(f"<fact>{p}</fact>" for p in pieces) + "</facts>"
            )
        return CompletionResponse(text="\n".join(pieces))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        yield self.complete(prompt, formatted=formatted)


def capped(text: str, max_tokens: int | None) -> str:
    """``text`` cut at ``max_tokens`` tokens, as a provider cuts an answer at its cap."""
    if max_tokens is None:
        return text
    tokens = encoding("o200k_base").encode_ordinary(text)
    return text if len(tokens) <= max_tokens else encoding("o200k_base").decode(tokens[:max_tokens])


@dataclass
class ContextfoldScripted:
    """The summarizer as a contextfold ``LLM``: the only caller of the three that passes
    ``max_tokens``, which cuts the answer; a schema gets the summary in its text field."""

    summarizer: ScriptedSummarizer
    name: str = "scripted"

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        text = capped("\n".join(self.summarizer.answer([text_of(m) for m in messages])), max_tokens)
        data = None
        if schema is not None:
            field_name = SUMMARY_FIELD if SUMMARY_FIELD in schema.get("properties", {}) else None
            data = {field_name: text} if field_name else {}
        return Completion(text=text, usage=Usage(self.name), data=data)

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)
