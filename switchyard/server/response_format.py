"""Request fields that constrain the output -> one StructuredOutputsParams (or None).

OpenAI's `response_format` (chat), vLLM's `structured_outputs` object and its older `guided_*` fields are
accepted; a request may use only one of them. Beside tool calls only a JSON format may stand, as the answer
the reply gives instead of calls (tool_calling/grammar.py).
"""

from __future__ import annotations

import re
from typing import Any

from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.errors import InvalidRequestError

_GUIDED_FIELDS = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}
_STRUCTURED_KEYS = ("json", "regex", "choice", "grammar", "json_object")
_SCHEMA_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""OpenAI's rule for json_schema.name."""


def structured_outputs_of(
    response_format: dict[str, Any] | None,
    structured_outputs: dict[str, Any] | None,
    guided: dict[str, Any],
) -> StructuredOutputsParams | None:
    """The one constraint a request asks for; InvalidRequestError for malformed or conflicting fields."""
    specs: list[StructuredOutputsParams] = []
    if response_format is not None:
        spec = _from_response_format(response_format)
        if spec is not None:
            specs.append(spec)
    if structured_outputs is not None:
        specs.append(_from_structured_outputs(structured_outputs))
    for field_name, kind in _GUIDED_FIELDS.items():
        value = guided.get(field_name)
        if value is not None:
            specs.append(StructuredOutputsParams(**{kind: value}, param=field_name))
    if guided.get("guided_json_object"):
        specs.append(StructuredOutputsParams(json_object=True, param="guided_json_object"))
    if len(specs) > 1:
        names = ", ".join(s.param for s in specs)
        raise InvalidRequestError(f"give at most one output constraint (got {names})", param=specs[1].param)
    return specs[0] if specs else None


def _from_response_format(response_format: dict[str, Any]) -> StructuredOutputsParams | None:
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True, param="response_format")
    if kind == "json_schema":
        body = response_format.get("json_schema")
        if not isinstance(body, dict):
            raise InvalidRequestError(
                "response_format.json_schema must be an object with name and schema", param="response_format"
            )
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequestError("response_format.json_schema.name is required", param="response_format")
        if not _SCHEMA_NAME.fullmatch(name):
            raise InvalidRequestError(
                "response_format.json_schema.name must be 1-64 letters, digits, underscores or dashes",
                param="response_format",
            )
        schema = body.get("schema")
        if schema is None:
            raise InvalidRequestError(
                "response_format.json_schema.schema is required", param="response_format"
            )
        return StructuredOutputsParams(json=schema, strict=bool(body.get("strict")), param="response_format")
    raise InvalidRequestError(
        "response_format.type must be 'text', 'json_object' or 'json_schema'", param="response_format"
    )


def _from_structured_outputs(value: dict[str, Any]) -> StructuredOutputsParams:
    if not isinstance(value, dict):
        raise InvalidRequestError("structured_outputs must be an object", param="structured_outputs")
    unknown = sorted(set(value) - set(_STRUCTURED_KEYS) - {"disable_any_whitespace", "whitespace_pattern"})
    if unknown:
        raise InvalidRequestError(
            f"structured_outputs has unknown keys: {', '.join(unknown)}", param="structured_outputs"
        )
    given = {k: value[k] for k in _STRUCTURED_KEYS if value.get(k) not in (None, False)}
    return StructuredOutputsParams(**given, param="structured_outputs")
