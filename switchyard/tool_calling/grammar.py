"""The structural tag that makes a reply a valid tool call: xgrammar tags per tool, arguments by schema.

`required` and a named tool allow nothing but calls (separated by the format's separator); `auto` allows free
text in which the format's trigger starts a call whose rest is constrained, or, with a JSON response format
beside the tools (the OpenAI Agents SDK sends both for an agent with an output type), either calls or an
answer matching the format, nothing else. Arguments use Switchyard's strict
JSON grammar (see xgrammar_backend.strict_json_ebnf), so they parse with json.loads and match the schema.
"""

from __future__ import annotations

import json
from typing import Any

from xgrammar.structural_tag import (
    GrammarFormat,
    OrFormat,
    StructuralTag,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
)

from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.engine.structured.xgrammar import strict_json_ebnf
from switchyard.errors import InvalidRequestError
from switchyard.tool_calling.format import ToolCallFormat
from switchyard.tool_calling.tools import FunctionTool, ToolChoice


def tool_call_structure(
    fmt: ToolCallFormat,
    tools: list[FunctionTool],
    choice: ToolChoice,
    parallel: bool = True,
    answer: StructuredOutputsParams | None = None,
) -> StructuredOutputsParams | None:
    """The constraint for this request's tool calls, or None when no call is possible (tool_choice "none").

    `answer` is the request's response format, if any: under tool_choice "auto" the reply is then either
    calls or an answer in that format. Only JSON formats combine (the reply must be told apart from a call).
    """
    if answer is not None and choice.mode != "auto":
        raise InvalidRequestError(
            f"{answer.param} cannot be combined with tool_choice '{choice.mode}', which allows only tool calls",
            param=answer.param,
        )
    if choice.mode == "none" or not tools:
        return answer
    selected = [t for t in tools if choice.mode != "named" or t.name == choice.name]
    tags = [
        TagFormat(
            begin=fmt.call_begin(tool.name),
            content=GrammarFormat(grammar=strict_json_ebnf(tool.parameters, tool.strict, param="tools")),
            end=fmt.call_end,
        )
        for tool in selected
    ]
    if choice.mode == "auto" and answer is not None:
        calls = TagsWithSeparatorFormat(
            tags=tags, separator=fmt.separator, at_least_one=True, stop_after_first=not parallel
        )
        structure = OrFormat(elements=[calls, GrammarFormat(grammar=_answer_grammar(fmt, answer))])
    elif choice.mode == "auto":
        structure = TriggeredTagsFormat(triggers=[fmt.trigger], tags=tags, stop_after_first=not parallel)
    elif choice.mode == "named":
        structure = tags[0]
    else:
        structure = TagsWithSeparatorFormat(
            tags=tags, separator=fmt.separator, at_least_one=True, stop_after_first=not parallel
        )
    tag = StructuralTag(format=structure)
    return StructuredOutputsParams(structural_tag=tag.model_dump_json(), param="tools")


def _answer_grammar(fmt: ToolCallFormat, answer: StructuredOutputsParams) -> str:
    """The grammar of a JSON answer that may stand instead of the calls."""
    if fmt.trigger.lstrip().startswith("{"):
        raise InvalidRequestError(
            f"{answer.param} cannot be combined with tool calls in this model's tool-call format: its calls are "
            "JSON objects too, so an answer could not be told apart from a call",
            param=answer.param,
        )
    schema: Any
    if answer.json_object:
        schema = {"type": "object"}
    elif answer.json is not None:
        schema = json.loads(answer.json) if isinstance(answer.json, str) else answer.json
    else:
        raise InvalidRequestError(
            f"only a JSON schema or json_object {answer.param} can be combined with tool calls",
            param=answer.param,
        )
    return strict_json_ebnf(schema, answer.strict, param=answer.param)
