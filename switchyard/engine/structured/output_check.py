"""The last line of "valid by construction": a finished constrained output is checked before it counts.

A grammar library can approximate what it was asked to enforce (xgrammar's regex inside JSON strings
accepted strings their `pattern` does not). So every output that finishes under a JSON schema, `json_object`,
regex or choice is checked with an independent implementation of the spec -- `json.loads` (strict) plus
`jsonschema`, Python's `re.fullmatch`, set membership -- and a mismatch is reported as a backend bug: the
request fails (finish_reason "error", a 500-class error for the server), the mismatch is logged and counted
by backend and construct. It is not retried: the text may already have been streamed, and a second backend
would double the latency of a request that hit a bug which the metric should make visible instead.

EBNF grammars and structural tags (tool calls, reasoning) have no independent checker and are not checked.
Formats (`format: date-time`, ...) are not checked either: jsonschema checks them only with optional
packages, and both backends enforce them more strictly than "any string".

Checkers are built when the grammar compiles (on the compile pool) and cached with it; a check costs one
`json.loads` and one validation of the finished text, per finished sequence, never per token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema

from switchyard.engine.structured.params import StructuredOutputsParams, parse_json_schema
from switchyard.errors import InvalidRequestError


class ConstrainedOutputError(RuntimeError):
    """A finished output breaks the spec its grammar was compiled from: a grammar backend bug."""

    def __init__(self, message: str, construct: str) -> None:
        super().__init__(message)
        self.construct = construct
        """The broken construct: a JSON Schema keyword (`pattern`, `minItems`, ...) or the spec kind."""


@dataclass(frozen=True)
class Mismatch:
    construct: str
    """The JSON Schema keyword that failed (`pattern`, `required`, ...), `json` for text that does not parse,
    or the spec kind (`regex`, `choice`, `json_object`)."""
    message: str


@dataclass(frozen=True)
class OutputCheck:
    """Checks finished texts against one spec; `check` returns None when the text is valid."""

    kind: str
    check: Callable[[str], Mismatch | None]


def output_check(spec: StructuredOutputsParams) -> OutputCheck | None:
    """The checker for `spec`'s outputs, or None where the kind has no independent checker."""
    kind = spec.kind
    if kind == "json":
        try:
            schema = parse_json_schema(spec)
        except InvalidRequestError:
            return None  # it did not compile either
        validator = jsonschema.validators.validator_for(schema)(schema)
        return OutputCheck(kind, lambda text: _check_json(text, validator))
    if kind == "json_object":
        return OutputCheck(kind, _check_json_object)
    if kind == "regex":
        try:
            pattern = re.compile(spec.regex or "")
        except re.error:
            return None  # a syntax Python's re does not read (the backends' regex dialects are wider)
        return OutputCheck(kind, lambda text: _check_regex(text, pattern))
    if kind == "choice":
        choices = frozenset(spec.choice or ())
        return OutputCheck(kind, lambda text: _check_choice(text, choices))
    return None


def _parse(text: str) -> tuple[Any, Mismatch | None]:
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, Mismatch("json", f"not valid JSON: {exc}")


def _check_json(text: str, validator: jsonschema.protocols.Validator) -> Mismatch | None:
    instance, problem = _parse(text)
    if problem is not None:
        return problem
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    return Mismatch(str(error.validator), f"'{error.validator}' fails at {where}: {error.message[:200]}")


def _check_json_object(text: str) -> Mismatch | None:
    instance, problem = _parse(text)
    if problem is not None:
        return problem
    return None if isinstance(instance, dict) else Mismatch("json_object", "not a JSON object")


def _check_regex(text: str, pattern: re.Pattern[str]) -> Mismatch | None:
    if pattern.fullmatch(text):
        return None
    return Mismatch("regex", f"does not match the regex {pattern.pattern[:200]!r}")


def _check_choice(text: str, choices: frozenset[str]) -> Mismatch | None:
    return None if text in choices else Mismatch("choice", "is none of the choices")
