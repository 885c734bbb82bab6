"""Hard limits of a run and the cost model: what ends a run no matter what the model says."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from switchyard.agents.model import ModelUsage


class RunStatus(StrEnum):
    """Why a run stopped; every status keeps the transcript and the partial output."""

    COMPLETED = "completed"
    NEEDS_APPROVAL = "needs_approval"
    MAX_TURNS = "max_turns"
    TIMEOUT = "timeout"
    MAX_TOKENS = "max_tokens"
    MAX_COST = "max_cost"
    LOOP_DETECTED = "loop_detected"
    TOOL_RETRIES_EXHAUSTED = "tool_retries_exhausted"
    GUARDRAIL_TRIPPED = "guardrail_tripped"
    TRUNCATED = "truncated"
    """The model's reply hit a token limit before it finished (its request's `max_tokens`, or the server's
    context), as text or as a call the cut left invalid: neither is an answer, so the run ends with the text in
    `partial_output`. A cut call is first asked again once with `ModelSettings.cut_call_max_tokens`
    (agents/reply_budget.py); the detail names its tool."""
    MODEL_ERROR = "model_error"
    """The endpoint failed (connection, HTTP error); resume once it is back."""
    RUNNING = "running"


@dataclass(frozen=True)
class Price:
    """US dollars per one million tokens."""

    input_per_million: float
    output_per_million: float


@dataclass(frozen=True)
class PriceTable:
    prices: dict[str, Price] = field(default_factory=dict)
    default: Price = Price(0.0, 0.0)

    def cost(self, model: str, usage: ModelUsage) -> float:
        price = self.prices.get(model, self.default)
        return (
            usage.input_tokens * price.input_per_million + usage.output_tokens * price.output_per_million
        ) / 1e6


@dataclass(frozen=True)
class RunLimits:
    """None means no limit; each limit reached ends the run with its own `RunStatus`."""

    max_turns: int | None = 10
    """Model calls in the run."""
    timeout: float | None = None
    """Wall-clock seconds of work, summed across resumes (time waiting for a human does not count)."""
    max_tokens: int | None = None
    """Input plus output tokens over all model calls."""
    max_cost: float | None = None
    """US dollars, from the runner's price table."""
    loop_threshold: int | None = 3
    """The same tool with the same arguments this many times ends the run."""
    max_tool_retries: int = 3
    """Bad tool calls (unknown name, invalid JSON or arguments) the model may make in a row."""

    def __post_init__(self) -> None:
        for name in ("max_turns", "timeout", "max_tokens", "max_cost", "loop_threshold"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None, got {value}")
        if not isinstance(self.max_tool_retries, int) or self.max_tool_retries < 0:
            raise ValueError(f"max_tool_retries must be an integer >= 0, got {self.max_tool_retries}")


def call_signature(name: str, arguments: dict[str, Any] | str) -> str:
    """Canonical text of a call, so `{"a":1,"b":2}` and `{"b": 2, "a": 1}` count as the same call."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return f"{name}:{arguments}"
    return f"{name}:{json.dumps(arguments, sort_keys=True, separators=(',', ':'))}"
