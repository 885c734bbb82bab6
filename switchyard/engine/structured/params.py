"""What a request's output must match (`StructuredOutputsParams`) and the spec-level helpers backends share.

This module imports nothing else of `engine.structured`, so sampling params, backends and the reasoning grammar
can all depend on it without a cycle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from switchyard.errors import InvalidRequestError


@dataclass(frozen=True)
class StructuredOutputsParams:
    """What the output must match; exactly one field is set (vLLM's StructuredOutputsParams, by name).

    `json` is a JSON schema (dict or its JSON text); `json_object` asks for any JSON object; `regex`, `choice`
    and `grammar` (EBNF, GBNF-style) constrain plain text; `structural_tag` is a tool-call structure in
    xgrammar's structural-tag JSON format (built by switchyard.tool_calling, rarely written by hand).
    """

    json: dict[str, Any] | str | None = None
    json_object: bool = False
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    structural_tag: dict[str, Any] | str | None = None
    strict: bool = False
    """JSON schema only: objects may not carry properties the schema does not name (OpenAI `strict`)."""
    param: str = "structured_outputs"
    """The request field that carried this spec, named in errors."""

    def __post_init__(self) -> None:
        if self.choice is not None and not isinstance(self.choice, tuple):
            object.__setattr__(self, "choice", tuple(self.choice))
        kinds = [
            k
            for k in ("json", "regex", "choice", "grammar", "structural_tag")
            if getattr(self, k) is not None
        ]
        if self.json_object:
            kinds.append("json_object")
        if len(kinds) != 1:
            raise InvalidRequestError(
                "exactly one of json, json_object, regex, choice, grammar or structural_tag must be given"
                + (f" (got {', '.join(kinds)})" if kinds else ""),
                param=self.param,
            )
        if self.choice is not None and (not self.choice or not all(isinstance(c, str) for c in self.choice)):
            raise InvalidRequestError("choice must be a non-empty list of strings", param=self.param)

    @property
    def kind(self) -> str:
        if self.json_object:
            return "json_object"
        return next(
            k
            for k in ("json", "regex", "choice", "grammar", "structural_tag")
            if getattr(self, k) is not None
        )

    @property
    def value(self) -> Any:
        return True if self.json_object else getattr(self, self.kind)

    def cache_key(self) -> str:
        """Content hash: equal specs share one compiled grammar whatever their dict key order."""
        value = self.value
        if isinstance(value, str) and self.kind in ("json", "structural_tag"):
            with contextlib.suppress(ValueError):  # compile() reports bad JSON; hash the text as is
                value = json.loads(value)
        text = json.dumps([self.kind, value, self.strict], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


def parse_json_schema(spec: StructuredOutputsParams) -> dict[str, Any] | bool:
    """The schema as a Python value, checked against the JSON Schema meta-schema; InvalidRequestError if not."""
    import jsonschema

    schema: Any = spec.json
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise InvalidRequestError(f"the JSON schema is not valid JSON: {exc}", param=spec.param) from exc
    if not isinstance(schema, dict | bool):
        raise InvalidRequestError("the JSON schema must be an object", param=spec.param)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise InvalidRequestError(f"invalid JSON schema at {where}: {exc.message}", param=spec.param) from exc
    return schema


def choice_ebnf(choices: Sequence[str]) -> str:
    """An EBNF grammar matching exactly one of `choices` (JSON string escapes are valid EBNF escapes)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)
