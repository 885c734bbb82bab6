"""`after_reasoning`: the constraint binds only the answer after </think>; the reasoning is free text."""

from __future__ import annotations

from pathlib import Path

import pytest
import xgrammar as xgr

from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.engine.structured.reasoning import after_reasoning
from switchyard.engine.structured.xgrammar import XGrammarBackend

SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> tuple[XGrammarBackend, object]:
    from tokenizer_factory import build_tokenizer

    tokenizer = build_tokenizer(Path(tmp_path_factory.mktemp("tok")), vocab_size=320)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return XGrammarBackend(tokenizer, len(tokenizer), [eos]), tokenizer


def finishes(
    backend: tuple[XGrammarBackend, object], spec: StructuredOutputsParams, text: str
) -> bool | None:
    """True: `text` is a whole reply; False: an unfinished one the grammar allows; None: refused."""
    grammar, tokenizer = backend
    matcher = xgr.GrammarMatcher(grammar.compile(spec))
    if not all(matcher.accept_token(t) for t in tokenizer.encode(text, add_special_tokens=False)):  # type: ignore[attr-defined]
        return None
    return bool(matcher.accept_token(tokenizer.convert_tokens_to_ids("<|im_end|>")))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("opened", "text", "expected"),
    [
        (True, 'Let me see {"a": 2} </th</think>\n\n{"a": 1}', True),
        (True, '{"a": 1}', False),  # still reasoning: the prompt opened the block
        (True, 'hmm</think>{"a": "x"}', None),  # the answer must match the schema
        (False, '<think>\nhmm\n</think>\n\n{"a": 1}', True),
        (False, '{"a": 1}', True),  # the block is optional where the prompt did not open it
        (False, 'hmm</think>{"a": 1}', None),  # no reasoning without its opening tag
        (False, '{"a": 1}</think>', None),
        (False, "</think>\n" + "\n" * 20 + '{"a": 1}', None),  # the gap before the answer is bounded
    ],
)
def test_json_after_reasoning(backend, opened: bool, text: str, expected: bool | None) -> None:  # type: ignore[no-untyped-def]
    spec = after_reasoning(StructuredOutputsParams(json=SCHEMA, strict=True), opened)
    assert finishes(backend, spec, text) is expected


def test_other_kinds(backend) -> None:  # type: ignore[no-untyped-def]
    cases = [
        (StructuredOutputsParams(regex=r"[0-9]{3}"), "123", "12a"),
        (StructuredOutputsParams(choice=("yes", "no")), "no", "maybe"),
        (StructuredOutputsParams(json_object=True), '{"x": [1]}', "[1]"),
        (StructuredOutputsParams(grammar='root ::= "a" "b"*'), "abb", "ba"),
    ]
    for spec, good, bad in cases:
        wrapped = after_reasoning(spec, opened=True)
        assert finishes(backend, wrapped, f"think</think>{good}") is True
        assert finishes(backend, wrapped, f"think</think>{bad}") is None
