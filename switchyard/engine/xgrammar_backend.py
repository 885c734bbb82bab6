r"""The xgrammar backend: Switchyard's default grammar engine (chosen by measurement, see benchmarks/RESULTS.md).

JSON is compiled without free whitespace: separators are exactly ", " and ": " (json.dumps' defaults), so a
model cannot spend its tokens on whitespace.

Strings with minLength/maxLength are where xgrammar's JSON grammar (0.2.x) is loose: their characters are
`[^"\\\r\n]`, which admits raw control characters (json.loads rejects them in strict mode). So JSON schemas go
through `strict_json_ebnf`, which narrows that class to `[^\0-\x1f"\\]` before compiling: length-bounded
strings then hold no escapes at all (an alternation with escapes there makes xgrammar's mask for a
`minLength: 600` string take seconds per token; measured). Every other string rule already excludes control
characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import xgrammar as xgr

from switchyard.engine.structured import StructuredOutputsParams, choice_ebnf, parse_json_schema
from switchyard.errors import InvalidRequestError


class XGrammarMatcher:
    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        self.matcher = xgr.GrammarMatcher(compiled)

    def accept_token(self, token_id: int) -> bool:
        return bool(self.matcher.accept_token(token_id))

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)

    def is_terminated(self) -> bool:
        return bool(self.matcher.is_terminated())


class XGrammarBackend:
    name = "xgrammar"

    def __init__(
        self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int], threads: int = 2
    ) -> None:
        self.vocab_size = vocab_size
        self.info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids)
        )
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=threads, cache_enabled=False)
        self.batch = xgr.BatchGrammarMatcher(max_threads=threads)

    def compile(self, spec: StructuredOutputsParams) -> xgr.CompiledGrammar:
        kind = spec.kind
        try:
            if kind == "json":
                schema = parse_json_schema(spec)
                return self.compiler.compile_grammar(strict_json_ebnf(schema, spec.strict, spec.param))
            if kind == "json_object":
                return self.compiler.compile_grammar(strict_json_ebnf({"type": "object"}, strict=False))
            if kind == "regex":
                return self.compiler.compile_regex(spec.regex)  # type: ignore[arg-type]
            if kind == "choice":
                return self.compiler.compile_grammar(choice_ebnf(spec.choice or ()))
            if kind == "grammar":
                return self.compiler.compile_grammar(spec.grammar)  # type: ignore[arg-type]
            return self.compiler.compile_structural_tag(spec.structural_tag)  # type: ignore[arg-type]
        except InvalidRequestError:
            raise
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError subclasses with a useful message
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InvalidRequestError(
                f"unsupported or invalid {_describe(kind)}: {message}", param=spec.param
            ) from exc

    def new_matcher(self, compiled: xgr.CompiledGrammar) -> XGrammarMatcher:
        return XGrammarMatcher(compiled)

    def allocate_bitmask(self, rows: int) -> torch.Tensor:
        return xgr.allocate_token_bitmask(rows, self.vocab_size)

    def fill_bitmask(self, matchers: Sequence[Any], bitmask: torch.Tensor, rows: list[int]) -> None:
        if len(matchers) == 1:
            matchers[0].matcher.fill_next_token_bitmask(bitmask, rows[0])
            return
        self.batch.batch_fill_next_token_bitmask([m.matcher for m in matchers], bitmask, indices=rows)

    def apply_bitmask(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        apply_bitmask(logits, bitmask, rows, self.vocab_size)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int], vocab_size: int) -> None:
    """Set forbidden logits of `rows` to -inf in place (bit i of word j allows token 32 * j + i)."""
    bitmask = bitmask.to(logits.device, non_blocking=True)
    if logits.dtype != torch.float32:
        # xgrammar's CPU kernel takes float32; mask a float32 copy and write it back.
        masked = logits.float()
        xgr.apply_token_bitmask_inplace(masked, bitmask, vocab_size=vocab_size, indices=rows)
        logits.copy_(masked)
        return
    xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab_size, indices=rows)


_LOOSE_STRING_CHARACTER = '[^\\"\\\\\\r\\n]'
_STRICT_STRING_CHARACTER = '[^\\0-\\x1f\\"\\\\]'


_UNENFORCED_KEYWORDS = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "dependencies",
        "dependentRequired",
        "dependentSchemas",
        "contains",
        "minContains",
        "maxContains",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
"""Keywords xgrammar (0.2.x) compiles without enforcing: output could break them, so such schemas are refused."""
_SIBLING_CONSTRAINTS = frozenset(
    {"type", "properties", "required", "items", "additionalProperties", "patternProperties", "enum", "const"}
)
_SUBSCHEMA_MAPS = frozenset({"properties", "patternProperties", "definitions", "$defs"})
_NOT_SUBSCHEMAS = frozenset({"enum", "const", "examples", "default", "required", "description", "title"})


def unenforced_constraint(schema: Any, path: str = "") -> str | None:
    """The first construct of `schema` xgrammar would silently not enforce, as "what at where", or None.

    Measured on JSONSchemaBench (benchmarks/RESULTS.md): these are exactly what made xgrammar's constrained
    outputs fail validation -- it falls back to any JSON value for them. Refusing them keeps every output valid.
    """
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            found = unenforced_constraint(item, f"{path}/{index}")
            if found:
                return found
        return None
    if not isinstance(schema, dict):
        return None
    where = path or "/"
    for keyword in sorted(_UNENFORCED_KEYWORDS & set(schema)):
        return f"keyword '{keyword}' at {where}"
    if schema.get("uniqueItems") is True:
        return f"keyword 'uniqueItems' at {where}"
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) > 1:
        return f"'allOf' with {len(all_of)} subschemas at {where}"
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in schema and _SIBLING_CONSTRAINTS & set(schema):
            return f"'{combinator}' combined with sibling constraints at {where}"
    for key, value in schema.items():
        if key in _NOT_SUBSCHEMAS:
            continue
        if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            for name, subschema in value.items():
                found = unenforced_constraint(subschema, f"{path}/{key}/{name}")
                if found:
                    return found
        elif isinstance(value, dict | list):
            found = unenforced_constraint(value, f"{path}/{key}")
            if found:
                return found
    return None


def strict_json_ebnf(schema: dict[str, Any] | bool, strict: bool = False, param: str | None = None) -> str:
    """xgrammar's EBNF for `schema` (compact separators) with strings that json.loads accepts in strict mode.

    Raises InvalidRequestError for a schema using a construct xgrammar would not enforce.
    """
    problem = unenforced_constraint(schema)
    if problem is not None:
        raise InvalidRequestError(
            f"unsupported JSON schema: {problem} is not enforced by the xgrammar backend", param=param
        )
    text = str(xgr.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=strict))
    return text.replace(_LOOSE_STRING_CHARACTER, _STRICT_STRING_CHARACTER)


def _describe(kind: str) -> str:
    return {
        "json": "JSON schema",
        "json_object": "JSON object grammar",
        "regex": "regex",
        "choice": "choice list",
        "grammar": "EBNF grammar",
        "structural_tag": "structural tag",
    }[kind]
