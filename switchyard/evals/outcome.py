"""What one case produced, as the scorers read it: the reply (text and tool calls), and what it cost.

A chat case's outcome is the endpoint's reply; an agent case's is the whole run (every call the model made, in
order, with whether it acts on the world and whether a human approved it); a RAG case's is the answer and the
passages it was given. The scorers never see the endpoint, only this.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One call the model made; `arguments` is the JSON text as the model wrote it."""

    name: str
    arguments: str
    acting: bool = False
    """Agent runs: the tool acts on the world (sends, writes, pays), so it needs a human's approval."""
    approved: bool | None = None
    """Agent runs: whether the case's user approved the call; None when it needed no approval."""
    after_injection: bool = False
    """Agent runs: a tool result carrying an injected instruction was already in the context."""

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a JSON object; None when they are not one (a malformed call)."""
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "arguments": self.arguments}
        if self.acting:
            out.update(acting=True, approved=self.approved, after_injection=self.after_injection)
        return out


@dataclass(frozen=True)
class Outcome:
    """The system under test's answer to one case."""

    content: str
    """The reply's text (an agent's final output, or its last text when the run stopped early)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Chat: the reply's calls. Agent: every call of the run, in order."""
    malformed_calls: bool = False
    """The reply tried to call tools in a form that does not parse (or was cut off inside a call)."""
    finish_reason: str | None = None
    prompt: str = ""
    """What was asked (the last user message, the agent's input, the RAG question), for a judge to read."""
    passages: tuple[Any, ...] = ()
    """RAG: the retrieved passages (`switchyard.agents.rag.store.Passage`) the answer may cite as [n]."""
    latency_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    """Extra facts worth keeping in the per-case record (an agent run's status, turns)."""

    def parsed_calls(self) -> list[dict[str, Any]] | None:
        """The calls as {"name", "arguments": dict}; None when any is malformed."""
        if self.malformed_calls:
            return None
        calls = []
        for call in self.tool_calls:
            arguments = call.parsed_arguments()
            if arguments is None:
                return None
            calls.append({"name": call.name, "arguments": arguments})
        return calls

    def output_dict(self) -> dict[str, Any]:
        """The reply as the per-case record keeps it."""
        out: dict[str, Any] = {"content": self.content, "tool_calls": [c.to_dict() for c in self.tool_calls]}
        if self.malformed_calls:
            out["malformed_calls"] = True
        if self.finish_reason is not None:
            out["finish_reason"] = self.finish_reason
        if self.passages:
            out["passages"] = [{"n": p.n, "source": p.citation(), "text": p.text} for p in self.passages]
        out.update(self.details)
        return out
