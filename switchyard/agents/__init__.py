"""Switchyard's agent runtime: function tools, a loop with hard limits, approvals, injection defences,
checkpoint/resume, handoffs and tracing, over any OpenAI-compatible endpoint (see ARCHITECTURE.md, Agents).

The names load lazily (as `switchyard`'s do): `import switchyard.agents` loads neither openai nor torch, and
`switchyard agent` or `switchyard rag` can name a missing extra before anything needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Eager, and light (pydantic only): importing the submodule `switchyard.agents.tool` binds its name on this
# package, which would otherwise hide the decorator of the same name from `__getattr__`.
from switchyard.agents.tool import tool

if TYPE_CHECKING:
    from switchyard.agents.agent import Agent, Handoff, ModelSettings, ToolConcurrency
    from switchyard.agents.checkpoint import CheckpointStore, RunNotFoundError
    from switchyard.agents.events import (
        ApprovalRequested,
        HandedOff,
        ModelDelta,
        ReasoningDelta,
        RunEvent,
        RunFinished,
        ToolCalled,
        ToolResult,
    )
    from switchyard.agents.guardrails import GuardrailResult
    from switchyard.agents.injection import Caller, InjectionPolicy
    from switchyard.agents.limits import Price, PriceTable, RunLimits, RunStatus
    from switchyard.agents.model import (
        ModelClient,
        ModelRequest,
        ModelResponse,
        ModelUsage,
        OpenAIModelClient,
        ToolCallRequest,
    )
    from switchyard.agents.result import RunResult
    from switchyard.agents.runner import Runner, RunStream
    from switchyard.agents.state import ApprovalItem, RunState
    from switchyard.agents.tool import FunctionTool, SideEffects, ToolContext, ToolTimeoutError
    from switchyard.agents.tracing import AgentTracer, TraceConfig

MODULE_ATTRS = {
    "Agent": "switchyard.agents.agent",
    "Handoff": "switchyard.agents.agent",
    "ModelSettings": "switchyard.agents.agent",
    "ToolConcurrency": "switchyard.agents.agent",
    "CheckpointStore": "switchyard.agents.checkpoint",
    "RunNotFoundError": "switchyard.agents.checkpoint",
    "ApprovalRequested": "switchyard.agents.events",
    "HandedOff": "switchyard.agents.events",
    "ModelDelta": "switchyard.agents.events",
    "ReasoningDelta": "switchyard.agents.events",
    "RunEvent": "switchyard.agents.events",
    "RunFinished": "switchyard.agents.events",
    "ToolCalled": "switchyard.agents.events",
    "ToolResult": "switchyard.agents.events",
    "GuardrailResult": "switchyard.agents.guardrails",
    "Caller": "switchyard.agents.injection",
    "InjectionPolicy": "switchyard.agents.injection",
    "Price": "switchyard.agents.limits",
    "PriceTable": "switchyard.agents.limits",
    "RunLimits": "switchyard.agents.limits",
    "RunStatus": "switchyard.agents.limits",
    "ModelClient": "switchyard.agents.model",
    "ModelRequest": "switchyard.agents.model",
    "ModelResponse": "switchyard.agents.model",
    "ModelUsage": "switchyard.agents.model",
    "OpenAIModelClient": "switchyard.agents.model",
    "ToolCallRequest": "switchyard.agents.model",
    "RunResult": "switchyard.agents.result",
    "RunStream": "switchyard.agents.runner",
    "Runner": "switchyard.agents.runner",
    "ApprovalItem": "switchyard.agents.state",
    "RunState": "switchyard.agents.state",
    "FunctionTool": "switchyard.agents.tool",
    "SideEffects": "switchyard.agents.tool",
    "ToolContext": "switchyard.agents.tool",
    "ToolTimeoutError": "switchyard.agents.tool",
    "AgentTracer": "switchyard.agents.tracing",
    "TraceConfig": "switchyard.agents.tracing",
}
"""Each lazily exported name and the module that defines it."""

__all__ = [
    "Agent",
    "AgentTracer",
    "ApprovalItem",
    "ApprovalRequested",
    "Caller",
    "CheckpointStore",
    "FunctionTool",
    "GuardrailResult",
    "HandedOff",
    "Handoff",
    "InjectionPolicy",
    "ModelClient",
    "ModelDelta",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "ModelUsage",
    "OpenAIModelClient",
    "Price",
    "PriceTable",
    "ReasoningDelta",
    "RunEvent",
    "RunFinished",
    "RunLimits",
    "RunNotFoundError",
    "RunResult",
    "RunState",
    "RunStatus",
    "RunStream",
    "Runner",
    "SideEffects",
    "ToolCallRequest",
    "ToolCalled",
    "ToolConcurrency",
    "ToolContext",
    "ToolResult",
    "ToolTimeoutError",
    "TraceConfig",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = MODULE_ATTRS.get(name)
    if module is None:
        raise AttributeError(f"module 'switchyard.agents' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
