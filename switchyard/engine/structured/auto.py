"""The `auto` grammar backend: each spec goes to the library that enforces it exactly (measured per construct).

xgrammar stays the engine for what it enforces as written: regexes, choices, EBNF grammars, structural tags
(tool calls, reasoning) and JSON schemas its guard accepts that hold no string regex. llguidance takes the JSON
schemas xgrammar only approximates: those its guard refuses (`not`, `if/then/else`, `allOf` of several
subschemas, `uniqueItems`, ...) and those with a `pattern`, `patternProperties` or `propertyNames` (xgrammar's
regex inside JSON strings accepts strings the pattern does not, e.g. a date-time pattern of optional groups);
schemas with a `format` or `oneOf` try llguidance first and fall back to xgrammar where it refuses them.
Measured on JSONSchemaBench: BENCHMARKS.md, "Structured outputs: exactness". Whichever library runs, the
output check (`output_check.py`) keeps a wrong output from being returned as a success.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from switchyard.engine.structured.backend import CompiledGrammar, GrammarBackend, GrammarMatcher
from switchyard.engine.structured.llguidance import LLGuidanceBackend
from switchyard.engine.structured.params import StructuredOutputsParams, parse_json_schema
from switchyard.engine.structured.xgrammar import XGrammarBackend, apply_bitmask, unenforced_constraint
from switchyard.errors import InvalidRequestError

logger = logging.getLogger(__name__)

_REGEX_KEYWORDS = frozenset({"pattern", "patternProperties", "propertyNames"})
"""Keywords whose regexes xgrammar's JSON grammar enforces loosely: their schemas go to llguidance."""
_LOOSE_KEYWORDS = frozenset({"format", "oneOf"})
"""Where xgrammar accepted instances JSONSchemaBench marks invalid (formats such as `date` checked loosely,
`oneOf` read as `anyOf`) and llguidance did not: llguidance first, xgrammar where llguidance refuses."""
_SCHEMA_MAPS = frozenset({"properties", "definitions", "$defs", "dependentSchemas"})
"""Keywords whose value maps names (any string, "pattern" included) to subschemas."""
_NOT_SCHEMAS = frozenset({"enum", "const", "examples", "default", "required"})


@dataclass(frozen=True)
class RoutedGrammar:
    """A grammar compiled by one of the auto backend's libraries, and which one."""

    backend: str
    compiled: CompiledGrammar


@dataclass
class RoutedMatcher:
    backend: str
    matcher: GrammarMatcher

    def accept_token(self, token_id: int) -> bool:
        return self.matcher.accept_token(token_id)

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()


def uses_string_regex(schema: Any) -> bool:
    """Whether some subschema of `schema` constrains strings or property names by a regex."""
    if isinstance(schema, dict):
        if _REGEX_KEYWORDS & set(schema):
            return True
        for key, value in schema.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                if any(uses_string_regex(subschema) for subschema in value.values()):
                    return True
            elif key not in _NOT_SCHEMAS and uses_string_regex(value):
                return True
        return False
    if isinstance(schema, list):
        return any(uses_string_regex(item) for item in schema)
    return False


def route(spec: StructuredOutputsParams) -> tuple[str, ...]:
    """The backends to try for `spec`, best first: the one that enforces it exactly, then any fallback.

    A JSON schema xgrammar would only approximate gets llguidance alone: falling back to xgrammar would
    trade a clear 400 for outputs that may break the schema.
    """
    if spec.kind != "json":
        return ("xgrammar",)
    try:
        schema = parse_json_schema(spec)
    except InvalidRequestError:
        return ("xgrammar",)  # it reports the problem
    if isinstance(schema, bool):
        return ("xgrammar",)
    if uses_string_regex(schema) or unenforced_constraint(schema) is not None:
        return ("llguidance",)
    if uses_keyword(schema, _LOOSE_KEYWORDS):
        return ("llguidance", "xgrammar")
    return ("xgrammar",)


def uses_keyword(schema: Any, keywords: frozenset[str]) -> bool:
    """Whether some subschema of `schema` uses one of `keywords`."""
    if isinstance(schema, dict):
        if keywords & set(schema):
            return True
        for key, value in schema.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                if any(uses_keyword(subschema, keywords) for subschema in value.values()):
                    return True
            elif key not in _NOT_SCHEMAS and uses_keyword(value, keywords):
                return True
        return False
    if isinstance(schema, list):
        return any(uses_keyword(item, keywords) for item in schema)
    return False


class AutoBackend:
    """xgrammar and llguidance side by side; compiled grammars and matchers remember which one made them."""

    name = "auto"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        self.vocab_size = vocab_size
        self.backends: dict[str, GrammarBackend] = {
            "xgrammar": XGrammarBackend(tokenizer, vocab_size, stop_token_ids),
        }
        try:
            self.backends["llguidance"] = LLGuidanceBackend(tokenizer, vocab_size, stop_token_ids)
        except Exception as exc:  # e.g. a tokenizer whose decoder llguidance cannot read
            logger.warning(
                "structured outputs: llguidance cannot use this tokenizer (%s); auto runs everything on xgrammar, "
                "and the output check reports what it lets through",
                exc,
            )

    def compile(self, spec: StructuredOutputsParams) -> RoutedGrammar:
        error: InvalidRequestError | None = None
        names = [name for name in route(spec) if name in self.backends] or ["xgrammar"]
        for name in names:
            try:
                return RoutedGrammar(name, self.backends[name].compile(spec))
            except InvalidRequestError as exc:
                error = error or exc
        assert error is not None
        raise error

    def new_matcher(self, compiled: RoutedGrammar) -> RoutedMatcher:
        return RoutedMatcher(compiled.backend, self.backends[compiled.backend].new_matcher(compiled.compiled))

    def allocate_bitmask(self, rows: int) -> torch.Tensor:
        return self.backends["xgrammar"].allocate_bitmask(rows)

    def fill_bitmask(self, matchers: Sequence[Any], bitmask: torch.Tensor, rows: list[int]) -> None:
        """Each library fills its own matchers' rows (both write the same 32-bit-word layout)."""
        for name, backend in self.backends.items():
            mine = [(m.matcher, row) for m, row in zip(matchers, rows, strict=True) if m.backend == name]
            if mine:
                backend.fill_bitmask([m for m, _ in mine], bitmask, [row for _, row in mine])

    def apply_bitmask(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        apply_bitmask(logits, bitmask, rows, self.vocab_size)

    def backend_of(self, compiled: RoutedGrammar) -> str:
        return compiled.backend
