"""Structured outputs for reasoning models: the grammar starts after the reasoning, not at the first token.

A JSON schema, regex or tool-call structure applied to the whole reply would forbid a Qwen3 or DeepSeek-R1
model its <think> block, so it would answer without reasoning. `after_reasoning` wraps a constraint so the
reasoning is free text up to "</think>" (at most a few newlines follow) and only then does the constraint
hold. Where the prompt opened the block (DeepSeek-R1's template ends in "<think>\\n") the reply starts inside it;
otherwise the block is optional, so a reply may also go straight to the constrained answer. It is the same
grammar mechanism tool calls use (xgrammar structural tags), so it needs the xgrammar backend.
"""

from __future__ import annotations

import json
from typing import Any

from xgrammar.structural_tag import (
    AnyTextFormat,
    GrammarFormat,
    OptionalFormat,
    RegexFormat,
    SequenceFormat,
    StructuralTag,
    TagFormat,
)

from switchyard.engine.structured.params import StructuredOutputsParams, choice_ebnf, parse_json_schema
from switchyard.engine.structured.xgrammar import strict_json_ebnf
from switchyard.reasoning import THINK_CLOSE, THINK_OPEN

GAP_BEFORE_ANSWER = r"[ \n]{0,8}"
"""Between "</think>" and the constrained answer: the newlines models write there, bounded so a model cannot
stall on them."""


def after_reasoning(spec: StructuredOutputsParams, opened: bool) -> StructuredOutputsParams:
    """`spec` as a structural tag that first lets the model reason (`opened`: the prompt began the block)."""
    if opened:
        reasoning: Any = TagFormat(begin="", content=AnyTextFormat(), end=THINK_CLOSE)
    else:
        reasoning = OptionalFormat(
            content=TagFormat(begin=THINK_OPEN, content=AnyTextFormat(), end=THINK_CLOSE)
        )
    sequence = SequenceFormat(
        elements=[reasoning, RegexFormat(pattern=GAP_BEFORE_ANSWER), _answer_format(spec)]
    )
    return StructuredOutputsParams(
        structural_tag=StructuralTag(format=sequence).model_dump_json(), param=spec.param
    )


def _answer_format(spec: StructuredOutputsParams) -> Any:
    """The constraint as one element of a structural tag, with the same strict JSON strings as on its own."""
    kind = spec.kind
    if kind == "json":
        return GrammarFormat(grammar=strict_json_ebnf(parse_json_schema(spec), spec.strict, spec.param))
    if kind == "json_object":
        return GrammarFormat(grammar=strict_json_ebnf({"type": "object"}, strict=False))
    if kind == "regex":
        return RegexFormat(pattern=spec.regex or "")
    if kind == "choice":
        return GrammarFormat(grammar=choice_ebnf(spec.choice or ()))
    if kind == "grammar":
        return GrammarFormat(grammar=spec.grammar or "")
    tag = spec.structural_tag
    return StructuralTag.model_validate(json.loads(tag) if isinstance(tag, str) else tag).format
