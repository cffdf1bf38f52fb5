"""The recall tools as LangChain tools, for the middleware and the chat history alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from contextfold.memory.recall_tools import BoundRecallTool


def structured_tool(
    function: Mapping[str, Any], answer: Callable[[dict[str, Any]], str]
) -> BaseTool:
    """A recall tool (its OpenAI ``function`` schema) as a ``StructuredTool`` whose JSON
    schema is the tool's own, answered by ``answer(arguments)``."""

    def call(**arguments: Any) -> str:
        return answer(arguments)

    return StructuredTool.from_function(
        func=call,
        name=function["name"],
        description=function["description"],
        args_schema=dict(function["parameters"]),
    )


def bound_tools(bound: list[BoundRecallTool]) -> list[BaseTool]:
    """Recall tools bound to one session as LangChain tools."""
    return [
        structured_tool(
            {"name": t.name, "description": t.description, "parameters": t.parameters}, t.call
        )
        for t in bound
    ]
