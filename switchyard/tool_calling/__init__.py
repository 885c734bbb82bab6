"""Tool calling: the tools of a request, the per-model call formats, and the grammar that forces valid calls."""

from switchyard.tool_calling.format import (
    ParsedToolCalls,
    ToolCall,
    ToolCallFormat,
    ToolCallParser,
    detect_format,
    get_format,
    registered_formats,
)
from switchyard.tool_calling.grammar import tool_call_structure
from switchyard.tool_calling.tools import FunctionTool, ToolChoice, parse_tool_choice, parse_tools

# Formats register themselves on import.
from switchyard.tool_calling import hermes, llama3_json, mistral  # noqa: F401  isort: skip

__all__ = [
    "FunctionTool",
    "ParsedToolCalls",
    "ToolCall",
    "ToolCallFormat",
    "ToolCallParser",
    "ToolChoice",
    "detect_format",
    "get_format",
    "parse_tool_choice",
    "parse_tools",
    "registered_formats",
    "tool_call_structure",
]
