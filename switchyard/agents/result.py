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

    def to_input_list(self) -> list[dict[str, Any]]:
        """The transcript, ready to be the messages of another chat request or run.

        A run can end with tool calls it never answered: cut short, stopped by the loop detector or a limit, or
        waiting for approval. Chat APIs refuse an assistant tool call without a tool reply, so each such call
        gets one here saying it was not run and why. `messages` itself stays as the run left it, since a resume
        of `state` may still run those calls.
        """
        reason = self.status.value + (f": {self.status_detail}" if self.status_detail else "")
        out: list[dict[str, Any]] = []
        messages = self.messages
        index = 0
        while index < len(messages):
            message = messages[index]
            out.append(message)
            index += 1
            calls = (message.get("tool_calls") or []) if message.get("role") == "assistant" else []
            # A call's reply is among the tool messages right after it (ids may repeat across turns).
            replied: set[str] = set()
            while index < len(messages) and messages[index].get("role") == "tool":
                replied.add(messages[index].get("tool_call_id", ""))
                out.append(messages[index])
                index += 1
            out.extend(_not_run(call["id"], reason) for call in calls if call["id"] not in replied)
        return out


def _not_run(call_id: str, reason: str) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": f"This call was not run: the run ended ({reason}).",
    }
