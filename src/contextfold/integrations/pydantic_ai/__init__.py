"""Pydantic AI: a capability and history processor that logs a run's messages to a
contextfold session and hands the model the view's compacted prompt (the
``pydantic-ai`` extra).

::

    history = ContextfoldHistory(memory.session("chat-1"), "default")
    agent = Agent(model, capabilities=[history])
"""

from contextfold.core.extras import needs_extra

with needs_extra("contextfold.integrations.pydantic_ai", "pydantic-ai"):
    from contextfold.integrations.pydantic_ai.history import ContextfoldHistory, SessionOf
    from contextfold.integrations.pydantic_ai.mapping import from_chat, to_chat

__all__ = ["ContextfoldHistory", "SessionOf", "from_chat", "to_chat"]
