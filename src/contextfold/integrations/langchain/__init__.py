"""LangChain v1 and LangGraph: an agent middleware and a chat message history over contextfold.

``ContextfoldMiddleware`` goes in ``create_agent(..., middleware=[...])``: the
graph's state keeps every message, the model is handed the view's compacted
prompt. ``ContextfoldChatMessageHistory`` serves LCEL chains through
``RunnableWithMessageHistory``. ``langchain_to_chat`` and ``chat_to_langchain``
map LangChain messages to the log's chat messages and back, without loss.

Needs the ``langchain`` extra (``pip install 'contextfold[langchain]'``);
importing this package without it raises ``MissingExtra`` naming it.
"""

from __future__ import annotations

from contextfold.core.extras import needs_extra

with needs_extra("contextfold.integrations.langchain", "langchain"):
    import langchain.agents.middleware  # noqa: F401
    import langchain_core.messages  # noqa: F401

from contextfold.integrations.langchain.history import ContextfoldChatMessageHistory
from contextfold.integrations.langchain.messages import chat_to_langchain, langchain_to_chat
from contextfold.integrations.langchain.middleware import ContextfoldMiddleware, ThreadSession

__all__ = [
    "ContextfoldChatMessageHistory",
    "ContextfoldMiddleware",
    "ThreadSession",
    "chat_to_langchain",
    "langchain_to_chat",
]
