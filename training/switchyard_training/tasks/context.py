"""What every task generator works with: the seeded context it draws from (`TaskContext`), the shared
prompt of a corpus group (`ToolSetting`), and the conversation it builds with its checks (`Conversation`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from switchyard.agents.demo_world import TOOLS, ToolWorld, dumps_result
from switchyard_training.entities import EntityLists
from switchyard_training.example import Category, Check, Example
from switchyard_training.tasks.tool_vocab import TRAIN_TOOL_VOCAB, ToolVocab


@dataclass(frozen=True)
class GroundedForms:
    """How answerable grounded questions are answered, as shares of those replies (the rest of the unit
    interval after `quote`, `value` and `attribute` is "According to [k], the answer is <value>.").

    A quote ("Acme was founded in 1971 [2].") copies the question's company and then continues where that
    name is followed by the asked attribute's words; a value first ("1971 [2].") makes finding the value's
    start in the right passage the one choice, the choice the copy-start loss (`pointer_loss`) supervises,
    after which the citation follows the value in the passage. An attribute reply ("Acme: its founding year
    is 1971 [2].") says the company and the asked attribute first, as the "not found" reply does ("Acme: its
    founding year is not in the passages."), so the query that must find the value's start has both right
    behind it, and quoting or declining is one choice, at the value.

    A quote's word after the name does not tell the passages apart: " was" goes on "founded in" and "started
    by", " is" "headquartered in" and "best known for", so which passage it quotes is decided a word or two
    later, by a lookup from the question's attribute to a passage's verb that no loss supervises (run 17: of
    the wrong tokens after the name, 62 of 91 went on with another of the company's passages). Attribute replies
    as the main form (run 19) made that choice right 0.83 of the time teacher-forced, but greedy replies broke
    before the value, the copy circuit carrying the name on as a passage does: grounded 0.458 against 0.487."""

    quote: float = 0.7
    value: float = 0.15
    attribute: float = 0.0

    def __post_init__(self) -> None:
        shares = (self.quote, self.value, self.attribute)
        if min(shares) < 0 or sum(shares) > 1 + 1e-9:
            raise ValueError(f"grounded reply shares must be >= 0 and sum to <= 1, got {self}")


@dataclass
class TaskContext:
    """What one conversation is drawn from: its own seeded RNG, the corpus' entity lists and tool world, and
    the corpus' answer forms and tools."""

    rng: random.Random
    entities: EntityLists
    world: ToolWorld
    grounded_forms: GroundedForms = field(default_factory=GroundedForms)
    tool_names: tuple[str, ...] = tuple(TOOLS)
    """The tools this corpus offers (a subset of `demo_world.TOOLS`, in its order)."""
    tool_vocab: ToolVocab = TRAIN_TOOL_VOCAB
    """What generated tools are made of (`tasks.open_tools`): training's words, or the held-out suites'."""
    math_tools: bool = True
    """Whether generated tool lists include calculators under users' names (the held-out suites leave them to
    the calculator suite)."""

    def pick(self, items: tuple[str, ...] | list[str]) -> str:
        return self.rng.choice(items)

    def person(self) -> str:
        return f"{self.pick(self.entities.first_names)} {self.pick(self.entities.last_names)}"

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


@dataclass(frozen=True)
class ToolSetting:
    """A system prompt and offered tools that several conversations share (a corpus group, `sessions`)."""

    system: str | None
    tools: list[dict[str, Any]]

    @property
    def names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]


class Conversation:
    """Builds the message list and the checks together, so a check's turn index is always right."""

    def __init__(self, system: str | None = None) -> None:
        self.messages: list[dict[str, Any]] = []
        self.checks: list[Check] = []
        self._calls = 0
        if system:
            self.messages.append({"role": "system", "content": system})

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def assistant(self, text: str, *checks: dict[str, Any]) -> None:
        self._check(checks)
        self.messages.append({"role": "assistant", "content": text})

    def call(self, calls: list[tuple[str, dict[str, Any]]], *checks: dict[str, Any]) -> list[str]:
        """An assistant turn made only of tool calls; returns their ids for the tool messages."""
        self._check(checks)
        ids = []
        tool_calls = []
        for name, arguments in calls:
            self._calls += 1
            ids.append(f"call_{self._calls}")
            tool_calls.append(
                {"id": ids[-1], "type": "function", "function": {"name": name, "arguments": arguments}}
            )
        self.messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
        return ids

    def tool(self, call_id: str, name: str, result: dict[str, Any] | str) -> None:
        """A tool result: a result object as JSON, or a text as the agent runtime words its own answers."""
        content = result if isinstance(result, str) else dumps_result(result)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})

    def _check(self, checks: tuple[dict[str, Any], ...]) -> None:
        turn = len(self.messages)
        self.checks.extend(Check(turn=turn, **fields) for fields in checks)

    def example(self, category: Category, tools: list[dict[str, Any]] | None = None) -> Example:
        return Example(category=category, messages=self.messages, tools=tools, checks=self.checks)
