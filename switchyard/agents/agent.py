"""The `Agent` dataclass: what a run needs to know about one assistant, and its handoffs."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from switchyard.agents.guardrails import Guardrail
from switchyard.agents.model import ModelClient
from switchyard.agents.tool import FunctionTool

HistoryFilter = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


@dataclass(frozen=True)
class ModelSettings:
    """Sampling settings sent with every model call of the agent."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    """Per call; raised for a turn that offers a tool declaring more (`FunctionTool.max_tokens`), lowered by
    the run's token budget (agents/reply_budget.py)."""
    cut_call_max_tokens: int | None = 1024
    """When a reply stops at its budget inside a tool call (finish_reason "length", the arguments unclosed),
    the turn is asked again once with this many tokens instead of keeping a broken call; cut again, the run
    ends as TRUNCATED naming the tool. None, or a budget no larger than the first, ends it at once. Both
    attempts count in the run's usage, and a streamed run's `ModelDelta` events show both."""
    seed: int | None = None
    tool_choice: str | dict[str, Any] | None = None
    """For the first model call of the agent ("auto", "required", "none" or a named function)."""
    tool_choice_after_tools: str | dict[str, Any] | None = "auto"
    """Once a tool result is in the conversation: "auto" by default, so a forced call cannot loop forever."""
    parallel_tool_calls: bool | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    replay_reasoning: bool = False
    """Send earlier turns' reasoning back as `reasoning_content`, which Qwen3-style templates show the model
    for the turns since the last user message (its thinking between tool calls). Off by default: some APIs
    (DeepSeek's) refuse the field in input. The run's messages keep the reasoning either way."""

    def __post_init__(self) -> None:
        for name in ("max_tokens", "cut_call_max_tokens"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None, got {value}")


class ToolConcurrency(StrEnum):
    """How the calls of one model turn run, once approvals and rejections are settled; results always reach
    the transcript in the model's call order, and every call is checkpointed under its idempotency key."""

    CONCURRENT = "concurrent"
    """All at once (async tools on the event loop, sync tools on their own threads), as the OpenAI Agents SDK
    runs them: a model that sends calls together treats them as independent."""
    ACTING_IN_ORDER = "acting_in_order"
    """Consecutive read-only calls at once; each acting call alone and in the model's order, so effects happen
    in that order and the reads after them see them."""
    SEQUENTIAL = "sequential"
    """One call at a time in the model's order, for tools that share state unsafe to touch concurrently."""


@dataclass
class Agent:
    """An assistant: its instructions, tools, model, and where it may hand the conversation over."""

    name: str
    """Unique within a run (handoffs and checkpoints refer to agents by name)."""
    instructions: str = "You are a helpful assistant."
    """The system message; the runtime appends its spotlighting notice and never puts tool output here."""
    tools: list[FunctionTool] = field(default_factory=list)
    tool_allowlist: frozenset[str] | None = None
    """If set, only these of `tools` are offered or run, whatever the model asks for."""
    model: str = "switchyard-chat"
    """Model name sent to the endpoint; also the key into the run's price table."""
    client: ModelClient | None = None
    """The endpoint; None uses the runner's default client."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    output_type: type[Any] | None = None
    """A pydantic model (or any type pydantic validates) for a structured final answer, offered as a
    `final_answer` tool so a constraining server enforces its schema. A valid `final_answer` call ends the run;
    the other calls of its turn are never run (agents/final_answer.py)."""
    handoffs: list[Agent | Handoff] = field(default_factory=list)
    tool_concurrency: ToolConcurrency = ToolConcurrency.CONCURRENT
    """How the calls of one turn run (see `ToolConcurrency`); tool timeouts and approvals apply in every mode."""
    input_guardrails: list[Guardrail] = field(default_factory=list)
    output_guardrails: list[Guardrail] = field(default_factory=list)

    def allowed_tools(self) -> list[FunctionTool]:
        if self.tool_allowlist is None:
            return list(self.tools)
        return [t for t in self.tools if t.name in self.tool_allowlist]

    def handoff_list(self) -> list[Handoff]:
        return [h if isinstance(h, Handoff) else Handoff(h) for h in self.handoffs]


@dataclass(frozen=True)
class Handoff:
    """Exposes a `transfer_to_<agent>` tool; the run continues with `agent` and the (filtered) history."""

    agent: Agent
    description: str | None = None
    history_filter: HistoryFilter | None = None

    @property
    def tool_name(self) -> str:
        return "transfer_to_" + re.sub(r"[^a-zA-Z0-9_]", "_", self.agent.name).lower()

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.tool_name,
                "description": self.description or f"Hand the conversation over to {self.agent.name}.",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            },
        }


def agents_reachable(root: Agent) -> dict[str, Agent]:
    """Every agent reachable through handoffs, by name (a resumed run finds its current agent here)."""
    found: dict[str, Agent] = {}
    pending = [root]
    while pending:
        agent = pending.pop()
        if agent.name in found:
            continue
        found[agent.name] = agent
        pending.extend(h.agent for h in agent.handoff_list())
    return found
