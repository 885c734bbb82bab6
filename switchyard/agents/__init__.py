"""Switchyard's agent runtime: function tools, a loop with hard limits, approvals, injection defences,
checkpoint/resume, handoffs and tracing, over any OpenAI-compatible endpoint (see ARCHITECTURE.md, Agents)."""

from __future__ import annotations

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
from switchyard.agents.tool import FunctionTool, SideEffects, ToolContext, ToolTimeoutError, tool
from switchyard.agents.tracing import AgentTracer, TraceConfig

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
