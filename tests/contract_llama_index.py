"""The LlamaIndex memory as the adapter contract drives it (``AdapterTurns``).

Each step's chat messages become LlamaIndex ``ChatMessage`` objects and are put
the way LlamaIndex's agents put them: the user's message with ``put``, a run's
tool calls, results and answer with one ``put_messages``. The prompt is what
``get`` hands the agent, turned back into chat messages (``meta`` dropped: it is
never sent to a model).
"""

from __future__ import annotations

from collections.abc import Sequence

from contextfold import Memory
from contextfold.core.messages import Message
from contextfold.integrations.llama_index import (
    ContextfoldMemory,
    from_llama_index,
    to_llama_index,
)


class LlamaIndexTurns:
    """``AdapterTurns`` over ``ContextfoldMemory``, through its async methods as agents call them."""

    def __init__(self, memory: Memory, session_id: str, view: str) -> None:
        self.memory = ContextfoldMemory(memory.session(session_id), view=view)

    def add(self, messages: Sequence[Message]) -> None:
        native = [to_llama_index(m) for m in messages]
        if len(native) == 1 and native[0].role.value == "user":
            self.memory.put(native[0])
        else:
            self.memory.put_messages(native)

    def prompt(self) -> list[Message]:
        out = []
        for message in self.memory.get():
            plain = from_llama_index(message)
            plain.pop("meta", None)
            out.append(plain)
        return out

    def close(self) -> None:
        """Nothing to release: the Memory belongs to the test."""
