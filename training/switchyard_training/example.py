"""One corpus example: an OpenAI-style conversation plus what a grader needs to score a model on it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Category(StrEnum):
    """The kinds of conversation the corpus holds; the corpus mixes them by weight."""

    CHAT = "chat"
    TOOL_CALL = "tool_call"
    TOOL_PARALLEL = "tool_parallel"
    NO_TOOL = "no_tool"
    JSON_EXTRACTION = "json_extraction"
    GROUNDED = "grounded"
    INJECTION = "injection"
    OPEN_TOOL_CALL = "open_tool_call"
    """The tool-use categories again over procedurally generated tools (`tasks.open_tools`), not the demo's six."""
    OPEN_TOOL_PARALLEL = "open_tool_parallel"
    OPEN_NO_TOOL = "open_no_tool"
    COPY = "copy"
    """Training-only drills (echo, list repeat, lookup, a paragraph repeated or rewritten) that teach copying
    spans of the prompt."""


class CheckKind(StrEnum):
    """What is graded on one assistant turn."""

    TOOL_CALL = "tool_call"
    """The turn must call exactly `tool_calls` (names and arguments)."""
    NO_TOOL = "no_tool"
    """Tools were offered but none fits: the turn must not call any."""
    JSON = "json"
    """The turn must be a JSON object equal to `json_object`."""
    GROUNDED = "grounded"
    """The answer must contain `answer` and cite `[citation]`; citation None means 'passages lack it'."""
    INJECTION = "injection"
    """An instruction was injected in a tool result or passage; `marker` must not appear in the turn."""
    FACT = "fact"
    """A plain-chat answer that must contain `answer`."""
    UNKNOWN = "unknown"
    """A question outside the fact table: the answer must say the assistant does not know."""


@dataclass(frozen=True)
class Check:
    """The expectation for the assistant message at `messages[turn]`; its prompt is `messages[:turn]`."""

    kind: CheckKind
    turn: int
    tool_calls: tuple[dict[str, Any], ...] = ()
    """Expected calls as {"name": str, "arguments": dict}, in order."""
    json_object: dict[str, Any] | None = None
    answer: str | None = None
    """A string the reply must contain (a tool result value, a fact, the grounded answer)."""
    citation: int | None = None
    marker: str | None = None
    """The injected instruction's payload; its presence in the reply means the injection was obeyed."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tool_calls"] = list(self.tool_calls)
        return {k: v for k, v in out.items() if v not in (None, [])}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Check:
        return cls(**{**raw, "kind": CheckKind(raw["kind"]), "tool_calls": tuple(raw.get("tool_calls", ()))})


@dataclass
class Example:
    """A whole conversation, trained on as is; `checks` say which assistant turns the gate scores and how."""

    category: Category
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    checks: list[Check] = field(default_factory=list)
    group: int | None = None
    """Examples with one group number were generated to share their prompt's beginning (one system prompt and
    tool list, one set of passages): training packs that beginning once for all of them."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "category": str(self.category),
                "messages": self.messages,
                "tools": self.tools,
                "checks": [c.to_dict() for c in self.checks],
                **({"group": self.group} if self.group is not None else {}),
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, line: str) -> Example:
        raw = json.loads(line)
        return cls(
            category=Category(raw["category"]),
            messages=raw["messages"],
            tools=raw.get("tools"),
            checks=[Check.from_dict(c) for c in raw.get("checks", [])],
            group=raw.get("group"),
        )
