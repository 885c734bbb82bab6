"""What a run returns: why it stopped, its output (final or partial), transcript, usage and cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from switchyard.agents.limits import RunStatus
from switchyard.agents.model import ModelUsage
from switchyard.agents.state import ApprovalItem, RunState


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: RunStatus
    status_detail: str
    final_output: Any
    """The answer (an `output_type` instance when the agent has one); None unless status is COMPLETED."""
    partial_output: str | None
    """The newest assistant text, kept whatever ended the run."""
    messages: list[dict[str, Any]]
    """The full transcript (without the system message)."""
    usage: ModelUsage
    cost: float
    turns: int
    last_agent: str
    pending_approvals: list[ApprovalItem]
    state: RunState
    """Approve or reject on it, then `Runner.resume(state)` (or serialise it with `state.to_json()`)."""

    @property
    def completed(self) -> bool:
        return self.status is RunStatus.COMPLETED

    @property
    def interrupted(self) -> bool:
        return self.status is RunStatus.NEEDS_APPROVAL
