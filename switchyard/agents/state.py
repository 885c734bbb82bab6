"""The state of one run: everything needed to continue it, as plain data that round-trips through JSON.

A run pauses for approvals and survives crashes by saving this state; `Runner.resume` continues from it
exactly where it stopped, so nothing here may refer to live objects (agents are named, tools are named).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum, StrEnum
from typing import Any

from switchyard.agents.limits import RunStatus
from switchyard.agents.model import ModelUsage


class CallStatus(StrEnum):
    PENDING = "pending"
    """Validated, not yet run."""
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    DONE = "done"
    """Has a result (a real one, an error, or a rejection notice)."""


@dataclass
class PendingCall:
    """One tool call of the last model turn, from validation to result."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    step: int
    """The step of the model output that made the call: part of the idempotency key."""
    status: CallStatus = CallStatus.PENDING
    approval_reason: str | None = None
    decision_reason: str | None = None
    result: str | None = None
    is_error: bool = False
    untrusted: bool = False
    """The result came from outside the run's control (spotlighted, taints the run)."""


@dataclass(frozen=True)
class ApprovalItem:
    """A call waiting for a human: approve or reject it on the state, then resume the run."""

    call_id: str
    agent: str
    tool: str
    arguments: dict[str, Any]
    reason: str


class ApprovalError(ValueError):
    """approve/reject named a call that is not waiting for a decision."""


@dataclass
class RunState:
    run_id: str
    root_agent: str
    current_agent: str
    input: str
    caller: str = "anonymous"
    scopes: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The transcript without the system message (rebuilt from the current agent on every turn)."""
    nonce: str = ""
    """Per-run random delimiter of untrusted content (spotlighting)."""
    tainted: bool = False
    """Untrusted content has entered the context: acting tools now need approval."""
    status: RunStatus = RunStatus.RUNNING
    status_detail: str = ""
    step: int = 0
    """Completed steps (model outputs and tool results), each persisted before the next begins."""
    turns: int = 0
    usage: ModelUsage = field(default_factory=ModelUsage)
    cost: float = 0.0
    elapsed_s: float = 0.0
    call_counts: dict[str, int] = field(default_factory=dict)
    bad_call_streak: int = 0
    tool_results_seen: int = 0
    pending: list[PendingCall] = field(default_factory=list)
    final_output: Any = None
    session_saved: int = 0
    """Leading messages already in the run's session (its history plus what earlier returns appended)."""
    summary: dict[str, Any] | None = None
    """The running summary of the oldest messages (text, covered) when a context budget is in force."""

    def approvals(self) -> list[ApprovalItem]:
        return [
            ApprovalItem(c.call_id, self.current_agent, c.name, c.arguments, c.approval_reason or "")
            for c in self.pending
            if c.status is CallStatus.AWAITING_APPROVAL
        ]

    def approve(self, call_id: str) -> None:
        self._awaiting(call_id).status = CallStatus.APPROVED

    def reject(self, call_id: str, reason: str = "rejected by a human") -> None:
        call = self._awaiting(call_id)
        call.status = CallStatus.REJECTED
        call.decision_reason = reason

    def _awaiting(self, call_id: str) -> PendingCall:
        for call in self.pending:
            if call.call_id == call_id and call.status is CallStatus.AWAITING_APPROVAL:
                return call
        raise ApprovalError(f"no call {call_id!r} is waiting for approval")

    def last_assistant_text(self) -> str | None:
        """The partial output: the newest assistant content, kept when a limit ends the run."""
        for message in reversed(self.messages):
            if message.get("role") == "assistant" and message.get("content"):
                return str(message["content"])
        return None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, default=_json_default)

    @classmethod
    def from_json(cls, text: str) -> RunState:
        data = json.loads(text)
        data["status"] = RunStatus(data["status"])
        data["usage"] = ModelUsage(**data["usage"])
        data["pending"] = [
            PendingCall(**{**call, "status": CallStatus(call["status"])}) for call in data["pending"]
        ]
        return cls(**data)


def _json_default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"cannot serialise {type(value).__name__} in a run state")
