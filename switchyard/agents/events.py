"""Events of a streamed run (`Runner.run_streamed`), in the order they happen."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from switchyard.agents.state import ApprovalItem

if TYPE_CHECKING:
    from switchyard.agents.result import RunResult


@dataclass(frozen=True)
class ModelDelta:
    agent: str
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """A piece of a reasoning model's thinking, streamed before (or between) its content."""

    agent: str
    text: str


@dataclass(frozen=True)
class ToolCalled:
    agent: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    """Parsed and validated; {} for a call refused before it could be parsed (see raw_arguments)."""
    raw_arguments: str = ""
    """The arguments exactly as the model wrote them, for showing what a refused call said."""


@dataclass(frozen=True)
class ToolResult:
    agent: str
    call_id: str
    tool: str
    result: str
    is_error: bool


@dataclass(frozen=True)
class ApprovalRequested:
    item: ApprovalItem


@dataclass(frozen=True)
class HandedOff:
    source: str
    target: str


@dataclass(frozen=True)
class RunFinished:
    result: RunResult


RunEvent = ModelDelta | ReasoningDelta | ToolCalled | ToolResult | ApprovalRequested | HandedOff | RunFinished
EventSink = Callable[[RunEvent], None]


def ignore(_: RunEvent) -> None:
    """The sink of runs nobody streams."""
