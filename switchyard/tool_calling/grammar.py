"""The structural tag that makes a reply a valid tool call: xgrammar tags per tool, arguments by schema.

`required` and a named tool allow nothing but calls (separated by the format's separator); `auto` allows free
text in which the format's trigger starts a call whose rest is constrained. Arguments use Switchyard's strict
JSON grammar (see xgrammar_backend.strict_json_ebnf), so they parse with json.loads and match the schema.
"""

from __future__ import annotations

from xgrammar.structural_tag import (
    GrammarFormat,
    StructuralTag,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
)

from switchyard.engine.structured import StructuredOutputsParams
from switchyard.engine.xgrammar_backend import strict_json_ebnf
from switchyard.tool_calling.format import ToolCallFormat
from switchyard.tool_calling.tools import FunctionTool, ToolChoice


def tool_call_structure(
    fmt: ToolCallFormat, tools: list[FunctionTool], choice: ToolChoice, parallel: bool = True
) -> StructuredOutputsParams | None:
    """The constraint for this request's tool calls, or None when no call is possible (tool_choice "none")."""
    if choice.mode == "none" or not tools:
        return None
    selected = [t for t in tools if choice.mode != "named" or t.name == choice.name]
    tags = [
        TagFormat(
            begin=fmt.call_begin(tool.name),
            content=GrammarFormat(grammar=strict_json_ebnf(tool.parameters, tool.strict, param="tools")),
            end=fmt.call_end,
        )
        for tool in selected
    ]
    if choice.mode == "auto":
        structure = TriggeredTagsFormat(triggers=[fmt.trigger], tags=tags, stop_after_first=not parallel)
    elif choice.mode == "named":
        structure = tags[0]
    else:
        structure = TagsWithSeparatorFormat(
            tags=tags, separator=fmt.separator, at_least_one=True, stop_after_first=not parallel
        )
    tag = StructuralTag(format=structure)
    return StructuredOutputsParams(structural_tag=tag.model_dump_json(), param="tools")
