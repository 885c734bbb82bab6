"""The `tools` and `tool_choice` of a chat request, validated the way OpenAI's API validates them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from switchyard.engine.structured.params import StructuredOutputsParams, parse_json_schema
from switchyard.errors import InvalidRequestError

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str | None
    parameters: dict[str, Any]
    """JSON schema of the arguments object; `{"type": "object"}` when the tool declared none."""
    strict: bool = False

    def for_template(self) -> dict[str, Any]:
        """The OpenAI-shaped tool chat templates render."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description is not None:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoice:
    mode: Literal["none", "auto", "required", "named"]
    name: str | None = None
    """The forced function when mode is "named"."""


def parse_tools(raw: list[dict[str, Any]] | None) -> list[FunctionTool]:
    """Function tools from a request's `tools`; InvalidRequestError for a malformed tool or duplicate names."""
    tools: list[FunctionTool] = []
    seen: set[str] = set()
    for index, item in enumerate(raw or []):
        where = f"tools[{index}]"
        if not isinstance(item, dict) or item.get("type", "function") != "function":
            raise InvalidRequestError(f"{where}: only tools of type 'function' are supported", param="tools")
        function = item.get("function")
        if not isinstance(function, dict):
            raise InvalidRequestError(f"{where}.function must be an object", param="tools")
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidRequestError(
                f"{where}.function.name must be 1-64 letters, digits, underscores or dashes", param="tools"
            )
        if name in seen:
            raise InvalidRequestError(f"{where}: duplicate tool name {name!r}", param="tools")
        seen.add(name)
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object"}
        spec = StructuredOutputsParams(json=parameters, param="tools")
        schema = parse_json_schema(spec)
        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            raise InvalidRequestError(f"{where}.function.parameters must be an object schema", param="tools")
        description = function.get("description")
        tools.append(FunctionTool(name, description, schema, strict=bool(function.get("strict", False))))
    return tools


def parse_tool_choice(raw: Any, tools: list[FunctionTool]) -> ToolChoice:
    """OpenAI semantics: omitted means "auto" with tools and "none" without; a named tool must exist."""
    if raw is None:
        return ToolChoice("auto" if tools else "none")
    if raw in ("none", "auto", "required"):
        if raw != "none" and not tools:
            raise InvalidRequestError(
                f"tool_choice {raw!r} needs at least one tool in tools", param="tool_choice"
            )
        return ToolChoice(raw)
    if isinstance(raw, dict) and raw.get("type") == "function":
        function = raw.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise InvalidRequestError("tool_choice.function.name must be a string", param="tool_choice")
        if name not in {t.name for t in tools}:
            raise InvalidRequestError(
                f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
            )
        return ToolChoice("named", name)
    raise InvalidRequestError(
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}",
        param="tool_choice",
    )
