"""The LlamaIndex memory as the adapter contract drives it (``AdapterTurns``).

Each step's chat messages become LlamaIndex ``ChatMessage`` objects
(``to_llama_index``, which refuses what cannot be one, naming the field) and
are put the way LlamaIndex's agents put them: the user's message alone with
``aput``, a run's tool calls, results and answer with one ``aput_messages``,
through the async methods the agents call. The prompt is what ``aget`` hands
the agent, turned back into chat messages (``meta`` dropped: it is never sent
to a model).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from contextfold import Memory
from contextfold.core.messages import Message
from contextfold.integrations.llama_index import (
    ContextfoldMemory,
    from_llama_index,
    to_llama_index,
)


class LlamaIndexTurns:
    """``AdapterTurns`` over ``ContextfoldMemory``."""

    def __init__(self, memory: Memory, session_id: str, view: str) -> None:
        self.memory = ContextfoldMemory(memory.session(session_id), view=view)

    def add(self, messages: Sequence[Message]) -> None:
        native = [to_llama_index(m) for m in messages]
        if len(native) == 1 and native[0].role.value == "user":
            asyncio.run(self.memory.aput(native[0]))
        else:
            asyncio.run(self.memory.aput_messages(native))

    def prompt(self) -> list[Message]:
        out = []
        for message in asyncio.run(self.memory.aget()):
            plain = from_llama_index(message)
            plain.pop("meta", None)
            out.append(plain)
        return out

    def close(self) -> None:
        """Nothing to release: the Memory belongs to the test."""
