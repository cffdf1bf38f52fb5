"""The adapter contract's driver for ``ContextfoldMiddleware``: LangChain's model-call hook, as
``create_agent``'s model node calls it.

LangChain hands a middleware the conversation at each model call: a
``ModelRequest`` holding the graph state's whole message list (the system
message apart) and the run's ``Runtime``. ``add`` converts the contract's new
chat messages to LangChain's types, appends them to the state and makes a
model call with it; ``prompt`` makes one more and returns what the model was
handed, as chat messages. The model itself is the handler LangChain passes
in, here one that keeps the request it gets and answers nothing the state
keeps, so the state is exactly what the contract added. The thread id is the
session id (``thread_session`` as by default), from the runtime as LangGraph
sets it. A conversation the adapter refuses is not kept, as an agent whose
model call failed keeps its state as it was.

The agent's own loop (``create_agent`` over ChatOpenAI and a scripted server)
is driven in ``test_adapter_langchain.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.runtime import ExecutionInfo, Runtime

from contextfold.core.messages import Message, for_model
from contextfold.integrations.langchain import (
    ContextfoldMiddleware,
    chat_to_langchain,
    langchain_to_chat,
)
from contextfold.memory.session import Memory

# Never called: the handler answers in its place. ModelRequest needs a model to name.
_MODEL = ChatOpenAI(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="unused")  # type: ignore[arg-type]


class LangChainTurns:
    """One LangGraph thread's model calls through ``ContextfoldMiddleware``."""

    def __init__(self, memory: Memory, session_id: str, view: str) -> None:
        self.middleware = ContextfoldMiddleware(memory=memory, view=view)
        info = ExecutionInfo(
            checkpoint_id="", checkpoint_ns="", task_id="model", thread_id=session_id
        )
        self.runtime: Runtime[Any] = Runtime(execution_info=info)
        self.system: SystemMessage | None = None
        self.state: list[AnyMessage] = []

    def add(self, messages: Sequence[Message]) -> None:
        system, state = self.system, list(self.state)
        for i, message in enumerate(messages):
            converted = chat_to_langchain(message, index=i)
            if isinstance(converted, SystemMessage) and system is None and not state:
                system = converted  # create_agent's system_prompt: beside the state
            else:
                state.append(converted)  # type: ignore[arg-type]
        self._model_call(system, state)
        self.system, self.state = system, state

    def prompt(self) -> list[Message]:
        return self._model_call(self.system, self.state)

    def _model_call(self, system: SystemMessage | None, state: list[AnyMessage]) -> list[Message]:
        handed: list[ModelRequest[Any]] = []

        def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
            handed.append(request)
            return ModelResponse(result=[AIMessage("")])

        request = ModelRequest(
            model=_MODEL,
            messages=list(state),
            system_message=system,
            state={"messages": list(state)},
            runtime=self.runtime,
        )
        self.middleware.wrap_model_call(request, handler)
        sent = handed[0]
        listed = [*([sent.system_message] if sent.system_message else []), *sent.messages]
        return [for_model(langchain_to_chat(m, index=i)) for i, m in enumerate(listed)]

    def close(self) -> None:
        """Nothing to release: the Memory belongs to the test."""
