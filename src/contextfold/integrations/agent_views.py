"""The settings of a view an agent framework's adapter creates: the agent's default preset.

An adapter that creates a view with a model and names no preset or pipeline
gets ``default_preset(model=True, agent=True)`` (``task-state``), which keeps
what the agent was doing across folds; without a model, the library's default
stands. The settings the user gave are otherwise passed on unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contextfold.strategies.presets import default_preset


def agent_view_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with the agent's default preset when they give a model and no preset."""
    out = dict(settings)
    model = out.get("model") is not None or out.get("llm") is not None
    if model and out.get("preset") is None and out.get("pipeline") is None:
        out["preset"] = default_preset(model=True, agent=True)
    return out
