"""LlamaIndex agents on contextfold: a ``BaseMemory`` over a session and its view.

::

    from contextfold import Memory
    from contextfold.integrations.llama_index import ContextfoldMemory

    memory = ContextfoldMemory.from_defaults(Memory("agent.db"), "user-42",
                                             system="You are a careful agent.",
                                             preset="offline", budget=8000)
    await agent.run("hi", memory=memory)      # FunctionAgent, ReActAgent, AgentWorkflow

Needs the ``llama-index`` extra (``pip install contextfold[llama-index]``);
importing this package without it raises ``MissingExtra`` naming it.
``from_llama_index`` and ``to_llama_index`` map ``ChatMessage`` to and from
the log's chat messages without loss (``messages``).
"""

from contextfold.integrations.llama_index.memory import ContextfoldMemory
from contextfold.integrations.llama_index.messages import (
    META_KEY,
    CallsIn,
    from_llama_index,
    to_llama_index,
)

__all__ = ["META_KEY", "CallsIn", "ContextfoldMemory", "from_llama_index", "to_llama_index"]
