r"""The last line of "valid by construction": a finished constrained output is checked before it counts.

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
`json.loads` and one validation of the finished text, per finished sequence, never per token. It runs on the
engine thread, so regexes (`pattern`, `patternProperties`, a regex spec) are matched by the `regex` package
(Python `re` semantics) under a time budget shared by the whole check: a backtracking pattern such as
`^\w+([.-]?\w+)*@...` would otherwise take minutes on a long generated string (measured on JSONSchemaBench)
and stall every request. A regex that runs out of budget, or that Python cannot parse, counts as matching:
the check only fails what it can prove wrong.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
import regex

from switchyard.engine.structured.params import StructuredOutputsParams, parse_json_schema
from switchyard.errors import InvalidRequestError

REGEX_BUDGET_SECONDS = 0.05
"""Regex matching time one check may spend (all its `pattern`s together) before it gives up on regexes."""


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
        budget = RegexBudget()
        validator_class = jsonschema.validators.extend(
            jsonschema.validators.validator_for(schema),
            {"pattern": budget.pattern_keyword, "patternProperties": budget.pattern_properties_keyword},
        )
        validator = validator_class(schema)
        return OutputCheck(kind, lambda text: _check_json(text, validator, budget))
    if kind == "json_object":
        return OutputCheck(kind, _check_json_object)
    if kind == "regex":
        try:
            pattern = regex.compile(spec.regex or "")
        except regex.error:
            return None  # a syntax Python's regexes do not read (the backends' dialects differ)
        budget = RegexBudget()
        return OutputCheck(kind, lambda text: _check_regex(text, pattern, budget))
    if kind == "choice":
        choices = frozenset(spec.choice or ())
        return OutputCheck(kind, lambda text: _check_choice(text, choices))
    return None


@dataclass
class RegexBudget:
    """The time one check may spend matching regexes; `start` resets it (checks run on one thread)."""

    deadline: float = 0.0

    def start(self) -> None:
        self.deadline = time.monotonic() + REGEX_BUDGET_SECONDS

    def search(self, pattern: str | regex.Pattern[str], text: str, full: bool = False) -> bool:
        """Whether `pattern` matches `text` (anywhere, or all of it); True when it cannot tell in time."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return True
        try:
            match = regex.fullmatch if full else regex.search
            return match(pattern, text, timeout=remaining) is not None
        except (TimeoutError, regex.error):
            return True

    def pattern_keyword(
        self, validator: Any, pattern: str, instance: Any, schema: Any
    ) -> Iterator[jsonschema.ValidationError]:
        """JSON Schema's `pattern` (an unanchored search), matched within the budget."""
        if validator.is_type(instance, "string") and not self.search(pattern, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")

    def pattern_properties_keyword(
        self, validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
    ) -> Iterator[jsonschema.ValidationError]:
        """JSON Schema's `patternProperties`: each property whose name a pattern finds obeys its subschema."""
        if not validator.is_type(instance, "object"):
            return
        for pattern, subschema in patterns.items():
            for name, value in instance.items():
                if self.search(pattern, name):
                    yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _parse(text: str) -> tuple[Any, Mismatch | None]:
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, Mismatch("json", f"not valid JSON: {exc}")


def _check_json(text: str, validator: jsonschema.protocols.Validator, budget: RegexBudget) -> Mismatch | None:
    instance, problem = _parse(text)
    if problem is not None:
        return problem
    budget.start()
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    except Exception:  # a schema the validator cannot evaluate (an unresolvable $ref): nothing proven wrong
        return None
    if error is None:
        return None
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    return Mismatch(str(error.validator), f"'{error.validator}' fails at {where}: {error.message[:200]}")


def _check_json_object(text: str) -> Mismatch | None:
    instance, problem = _parse(text)
    if problem is not None:
        return problem
    return None if isinstance(instance, dict) else Mismatch("json_object", "not a JSON object")


def _check_regex(text: str, pattern: regex.Pattern[str], budget: RegexBudget) -> Mismatch | None:
    budget.start()
    if budget.search(pattern, text, full=True):
        return None
    return Mismatch("regex", f"does not match the regex {pattern.pattern[:200]!r}")


def _check_choice(text: str, choices: frozenset[str]) -> Mismatch | None:
    return None if text in choices else Mismatch("choice", "is none of the choices")
