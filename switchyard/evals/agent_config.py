"""The agent an agent suite runs: instructions, sampling settings, limits, and its tools as data (a JSON file).

A tool is its OpenAI spec plus how it answers: from recorded results (a case adds its own, e.g. a document
carrying an injected instruction), from the agent demo's offline world (`"implementation": "demo"`, see
`switchyard.agents.demo_world`), or as a user's own calculator would (`"arithmetic"`). Whether it acts on the
world decides the approval and injection rules; `max_tokens` is the reply budget its calls may need.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from switchyard.errors import SwitchyardError
from switchyard.evals.suite import Recording

IMPLEMENTATIONS = ("demo", "arithmetic")
"""Live tool implementations a config may name instead of (or behind) recorded results: "demo" runs the demo
world's tool of the same name; "arithmetic" evaluates the call's one string argument (+ - * / and parentheses,
the demo world's safe evaluator) and returns the number as text, as a user's `calculator(expression)` would."""


class AgentConfigError(SwitchyardError, ValueError):
    """An agent config file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class ToolConfig:
    name: str
    description: str
    parameters: dict[str, Any]
    acting: bool = False
    needs_approval: bool = False
    """Ask the case's user before running it (acting tools always need approval once data is in the context)."""
    recorded: tuple[Recording, ...] = ()
    implementation: str | None = None
    max_tokens: int | None = None
    """The reply budget a call of this tool may need (`FunctionTool.max_tokens`); None leaves the agent's."""

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class AgentConfig:
    name: str = "assistant"
    instructions: str = "You are a helpful assistant with access to tools."
    tools: tuple[ToolConfig, ...] = ()
    temperature: float | None = 0.0
    max_tokens: int | None = 192
    max_turns: int = 4
    timeout: float | None = 300.0
    spotlight: bool = False
    """Wrap tool results in the runtime's random delimiters (off for models trained on raw tool JSON)."""

    def tool(self, name: str) -> ToolConfig | None:
        return next((t for t in self.tools if t.name == name), None)


_CONFIG_KEYS = {
    "name",
    "instructions",
    "tools",
    "temperature",
    "max_tokens",
    "max_turns",
    "timeout",
    "spotlight",
}
_TOOL_KEYS = {
    "name",
    "description",
    "parameters",
    "side_effects",
    "needs_approval",
    "recorded",
    "implementation",
    "max_tokens",
}


def load_agent_config(path: Path) -> AgentConfig:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AgentConfigError(f"{path}: cannot read the agent config: {exc}") from None
    try:
        return parse_agent_config(raw)
    except (ValueError, TypeError, KeyError) as exc:
        raise AgentConfigError(f"{path}: {exc}") from None


def parse_agent_config(raw: Any) -> AgentConfig:
    if not isinstance(raw, dict):
        raise ValueError("an agent config is a JSON object")
    unknown = set(raw) - _CONFIG_KEYS
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
    tools = tuple(_parse_tool(t) for t in raw.get("tools", ()))
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"tool names repeat: {names}")
    defaults = AgentConfig()
    return AgentConfig(
        name=str(raw.get("name", defaults.name)),
        instructions=str(raw.get("instructions", defaults.instructions)),
        tools=tools,
        temperature=raw.get("temperature", defaults.temperature),
        max_tokens=raw.get("max_tokens", defaults.max_tokens),
        max_turns=int(raw.get("max_turns", defaults.max_turns)),
        timeout=raw.get("timeout", defaults.timeout),
        spotlight=bool(raw.get("spotlight", defaults.spotlight)),
    )


def _parse_tool(raw: Any) -> ToolConfig:
    if not isinstance(raw, dict) or "name" not in raw:
        raise ValueError("a tool is an object with a name")
    unknown = set(raw) - _TOOL_KEYS
    if unknown:
        raise ValueError(f"tool {raw['name']!r}: unknown field(s): {', '.join(sorted(unknown))}")
    side_effects = raw.get("side_effects", "read_only")
    if side_effects not in ("read_only", "acting"):
        raise ValueError(f"tool {raw['name']!r}: side_effects is read_only or acting, not {side_effects!r}")
    implementation = raw.get("implementation")
    if implementation is not None and implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"tool {raw['name']!r}: implementation {implementation!r} unknown ({IMPLEMENTATIONS})"
        )
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= 0):
        raise ValueError(f"tool {raw['name']!r}: max_tokens is a positive integer, not {max_tokens!r}")
    recorded = tuple(
        Recording(r["result"], r.get("arguments"), bool(r.get("injected", False)))
        for r in raw.get("recorded", ())
    )
    return ToolConfig(
        name=str(raw["name"]),
        description=str(raw.get("description", "")),
        parameters=raw.get("parameters", {"type": "object", "properties": {}}),
        acting=side_effects == "acting",
        needs_approval=bool(raw.get("needs_approval", False)),
        recorded=recorded,
        implementation=implementation,
        max_tokens=max_tokens,
    )
