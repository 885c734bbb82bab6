"""JSON schemas xgrammar would only partly enforce: refused with a 400 naming the construct, or rewritten into an
equivalent schema it enforces. Checked on the grammar itself (no model): the invalid instance must not match."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from switchyard.engine.structured.xgrammar import strict_json_ebnf
from switchyard.errors import InvalidRequestError
from switchyard.tool_calling import get_format, parse_tool_choice, parse_tools, tool_call_structure


def accepts(schema: dict[str, Any] | bool, instance: Any) -> bool:
    grammar = xgr.Grammar.from_ebnf(strict_json_ebnf(schema))
    return bool(_is_grammar_accept_string(grammar, json.dumps(instance)))


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "number", "multipleOf": 0.5}, "'multipleOf' on a non-integer at /"),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
            "'$ref' to 'https://example.com/a.json' at /properties/a",
        ),
        ({"$defs": {"a": {"$id": "urn:a", "type": "integer"}}, "$ref": "urn:a"}, "'$ref' to 'urn:a' at /"),
        (
            {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n", "maximum": 3}}},
            "'$ref' combined with sibling constraints at /properties/a",
        ),
        ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}, "'pattern' combined with"),
        ({"type": "string", "const": "x", "maxLength": 0}, "no value of 'enum'/'const' at /"),
        ({"type": "string", "enum": [1, 2]}, "no value of 'enum'/'const' at /"),
        (
            {"type": "object", "properties": {}, "required": ["a"], "additionalProperties": False},
            "required 'a' at / is not in properties",
        ),
        (
            {"type": "object", "patternProperties": {"^a": {"type": "integer"}}, "required": ["ab"]},
            "required 'ab' at / is declared only through patternProperties",
        ),
        (False, "no output can match"),
    ],
)
def test_constructs_xgrammar_would_not_enforce_are_refused(schema: Any, problem: str) -> None:
    with pytest.raises(InvalidRequestError, match="JSON schema") as info:
        strict_json_ebnf(schema, param="response_format")
    assert problem in str(info.value) and info.value.param == "response_format"


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        ({"type": "string", "enum": [1, "a", "b"]}, "a", 1),
        ({"enum": ["x", 3, None], "type": ["integer", "null"], "minimum": 2}, 3, "x"),
        ({"type": "object", "required": ["a"]}, {"a": [1]}, {}),
        ({"type": "object", "properties": {"a": {}}, "required": ["a", "b"]}, {"a": 1, "b": 2}, {"a": 1}),
        (
            {"type": "object", "required": ["b"], "additionalProperties": {"type": "integer"}},
            {"b": 2},
            {"b": "x"},
        ),
        (  # draft-07: a $ref replaces its siblings, for the validator as for xgrammar
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "definitions": {"n": {"type": "integer", "maximum": 3}},
                "$ref": "#/definitions/n",
                "minimum": 100,
            },
            2,
            7,
        ),
        (  # an extension keyword beside a $ref constrains nothing
            {
                "$defs": {"n": {"type": "integer"}},
                "$ref": "#/$defs/n",
                "x-kubernetes-patch-strategy": "merge",
            },
            2,
            "2",
        ),
        (True, {"any": ["json"]}, None),
    ],
)
def test_rewritten_schemas_enforce_exactly_what_they_say(schema: Any, valid: Any, invalid: Any) -> None:
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert validator.is_valid(valid) and accepts(schema, valid)
    if invalid is not None:
        assert not validator.is_valid(invalid)
        assert not accepts(schema, invalid)


def test_the_request_schema_is_not_modified() -> None:
    schema = {
        "type": "object",
        "properties": {"k": {"type": "string", "enum": ["a", 1]}},
        "required": ["k", "j"],
    }
    before = json.dumps(schema)
    strict_json_ebnf(schema)
    assert json.dumps(schema) == before


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 5, "maxLength": 2},
        {"type": "integer", "maximum": 1e30},
        {"$ref": "#/$defs/missing"},
    ],
)
def test_schemas_xgrammar_rejects_give_a_clean_message(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError, match="unsupported or invalid JSON schema") as info:
        strict_json_ebnf(schema, param="response_format")
    message = str(info.value)
    assert ".cc:" not in message and "Check failed" not in message and not message.startswith("[")


def test_a_tool_whose_parameters_xgrammar_rejects_is_a_request_error() -> None:
    """Tool schemas are converted outside the compile pool; a converter error there must still be a 400."""
    raw = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "string", "minLength": 9, "maxLength": 1}},
                },
            },
        }
    ]
    tools = parse_tools(raw)
    with pytest.raises(InvalidRequestError, match="minLength") as info:
        tool_call_structure(get_format("hermes"), tools, parse_tool_choice("required", tools))
    assert info.value.param == "tools"


@pytest.mark.parametrize(
    "schema",
    [{"type": "string"}, {"type": "string", "maxLength": 3}, {"type": "object"}, {"type": "array"}],
)
def test_strings_never_hold_surrogates(schema: dict[str, Any]) -> None:
    """U+D800 encoded in 3 bytes is not UTF-8: decoded it becomes replacement characters, so a sampled one
    broke length bounds (a 16-character city came back 18 long). Every kind of JSON string refuses it."""
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([f"<{i}>" for i in range(8)]))
    grammar = compiler.compile_grammar(xgr.Grammar.from_ebnf(strict_json_ebnf(schema)))

    def matches(text: bytes) -> bool:
        matcher = xgr.GrammarMatcher(grammar, terminate_without_stop_token=True)
        return matcher.accept_string(text) and matcher.is_terminated()

    for good, bad in [
        (b'"a\xc3\xa9"', b'"a\xed\xa0\x80"'),
        (b'{"\xc3\xa9": 1}', b'{"\xed\xbf\xbf": 1}'),
        (b'["\xf0\x9f\x98\x80"]', b'["\xed\xa0\x80"]'),
    ]:
        if matches(good):  # the instance fits this schema's shape: its surrogate twin must not
            assert not matches(bad), (schema, bad)
    assert any(matches(good) for good in (b'"a\xc3\xa9"', b'{"\xc3\xa9": 1}', b'["\xf0\x9f\x98\x80"]'))
