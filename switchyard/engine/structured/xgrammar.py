r"""The xgrammar backend: Switchyard's default grammar engine (chosen by measurement, see benchmarks/RESULTS.md).

JSON is compiled without free whitespace: separators are exactly ", " and ": " (json.dumps' defaults), so a
model cannot spend its tokens on whitespace.

Strings with minLength/maxLength are where xgrammar's JSON grammar (0.2.x) is loose: their characters are
`[^"\\\r\n]`, which admits raw control characters (json.loads rejects them in strict mode). So JSON schemas go
through `strict_json_ebnf`, which narrows that class to `[^\0-\x1f"\\]` before compiling: length-bounded
strings then hold no escapes at all (an alternation with escapes there makes xgrammar's mask for a
`minLength: 600` string take seconds per token; measured). Every other string rule already excludes control
characters.

Where xgrammar would silently not enforce part of a schema, the schema is either refused with a 400 naming
the construct and its path (`unenforced_constraint`) or first rewritten into an equivalent one it enforces
(`enforceable_schema`): enum values that break their siblings are dropped, and required names missing from
`properties` are declared there. Every output then validates against the schema as sent.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

import jsonschema
import torch
import xgrammar as xgr

from switchyard.engine.structured.params import StructuredOutputsParams, choice_ebnf, parse_json_schema
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
            raise InvalidRequestError(
                f"unsupported or invalid {_describe(kind)}: {xgrammar_message(exc)}", param=spec.param
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
_STRING_CLASS = re.compile(r"\[\^(\\0-\\x1f(?:\\.|[^\]\\])*)\]")
"""A negated character class of JSON string characters (it excludes the control characters first)."""
_SURROGATES = "\\ud800-\\udfff"
"""xgrammar matches surrogate code points (U+D800-U+DFFF) by their 3-byte encodings, which are not UTF-8:
they reach the text as replacement characters (and break length bounds), so string classes exclude them."""


def _strict_strings(grammar: str) -> str:
    """JSON strings that json.loads accepts in strict mode and that decode as UTF-8."""
    grammar = grammar.replace(_LOOSE_STRING_CHARACTER, _STRICT_STRING_CHARACTER)
    return _STRING_CLASS.sub(
        lambda m: m.group(0) if _SURROGATES in m.group(1) else f"[^{m.group(1)}{_SURROGATES}]", grammar
    )


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
_VALIDATION_KEYWORDS = frozenset(
    {"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"}
    | {"maxLength", "minLength", "pattern", "format", "items", "prefixItems", "additionalItems", "maxItems"}
    | {"minItems", "uniqueItems", "contains", "properties", "patternProperties", "additionalProperties"}
    | {"required", "maxProperties", "minProperties", "propertyNames", "allOf", "anyOf", "oneOf", "not"}
    | _UNENFORCED_KEYWORDS
)
"""Keywords that constrain an instance; others beside a `$ref` (titles, `x-` extensions) only annotate."""
_REFS_IGNORE_SIBLINGS = frozenset({"draft3", "draft4", "draft6", "draft7"})
"""Drafts in which a `$ref` replaces its siblings, so xgrammar following only the reference is exact."""


def unenforced_constraint(schema: Any, path: str = "", ref_siblings_apply: bool | None = None) -> str | None:
    """The first construct of `schema` xgrammar would silently not enforce, as "what at where", or None.

    Measured on JSONSchemaBench (benchmarks/RESULTS.md): these are exactly what made xgrammar's constrained
    outputs fail validation -- it falls back to any JSON value for them, or drops the keyword. Refusing them
    keeps every output valid. `ref_siblings_apply`: whether the schema's draft applies a `$ref`'s siblings
    (2019-09 on); None reads it from the root's `$schema`.
    """
    if ref_siblings_apply is None:
        ref_siblings_apply = _ref_siblings_apply(schema)
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            found = unenforced_constraint(item, f"{path}/{index}", ref_siblings_apply)
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
    reference = schema.get("$ref")
    if isinstance(reference, str):
        if reference != "#" and not reference.startswith("#/"):
            return f"'$ref' to '{reference}' at {where} (only local references, '#/...', are resolved)"
        if ref_siblings_apply and _VALIDATION_KEYWORDS & set(schema):
            return f"'$ref' combined with sibling constraints at {where}"
    if "multipleOf" in schema and schema.get("type") != "integer":
        return f"keyword 'multipleOf' on a non-integer at {where}"
    if "pattern" in schema and (schema.get("minLength", 0) != 0 or "maxLength" in schema):
        return f"'pattern' combined with 'minLength'/'maxLength' at {where}"
    for key, value in schema.items():
        if key in _NOT_SUBSCHEMAS:
            continue
        if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            for name, subschema in value.items():
                found = unenforced_constraint(subschema, f"{path}/{key}/{name}", ref_siblings_apply)
                if found:
                    return found
        elif isinstance(value, dict | list):
            found = unenforced_constraint(value, f"{path}/{key}", ref_siblings_apply)
            if found:
                return found
    return None


def _ref_siblings_apply(schema: Any) -> bool:
    """Whether the root's draft (by `$schema`, else 2020-12, as jsonschema reads it) applies `$ref` siblings."""
    if not isinstance(schema, dict):
        return True
    validator = jsonschema.validators.validator_for(schema)
    return validator.__name__.lower().removesuffix("validator") not in _REFS_IGNORE_SIBLINGS


def strict_json_ebnf(schema: dict[str, Any] | bool, strict: bool = False, param: str | None = None) -> str:
    """xgrammar's EBNF for `schema` (compact separators) with strings that json.loads accepts in strict mode.

    Raises InvalidRequestError for a schema using a construct xgrammar would not enforce, or one it rejects.
    """
    if schema is False:
        raise InvalidRequestError("the JSON schema is `false`: no output can match it", param=param)
    if schema is True:
        schema = {}  # the schema that accepts any JSON value
    problem = unenforced_constraint(schema)
    if problem is not None:
        raise InvalidRequestError(
            f"unsupported JSON schema: {problem} is not enforced by the xgrammar backend", param=param
        )
    enforceable = enforceable_schema(schema, strict, param)
    try:
        grammar = xgr.Grammar.from_json_schema(enforceable, any_whitespace=False, strict_mode=strict)
    except Exception as exc:  # the converter's RuntimeError names the problem (e.g. minLength > maxLength)
        raise InvalidRequestError(
            f"unsupported or invalid JSON schema: {xgrammar_message(exc)}", param=param
        ) from exc
    return _strict_strings(str(grammar))


def enforceable_schema(
    schema: dict[str, Any], strict: bool = False, param: str | None = None
) -> dict[str, Any]:
    """`schema` rewritten, with the same valid instances, into constructs xgrammar enforces as written.

    xgrammar (0.2.x) reads `enum`/`const` without their siblings (`{"type": "string", "enum": [1, "a"]}`
    would allow 1) and ignores `required` names that `properties` does not declare (`{}` would pass). So
    enum values failing their siblings are dropped, and a required name is declared with the schema
    `additionalProperties` gives it. Raises InvalidRequestError where nothing could match.
    """
    validator = jsonschema.validators.validator_for(schema)(schema)
    rewritten = copy.deepcopy(schema)
    _make_enforceable(rewritten, "", validator, strict, param)
    return rewritten


def _make_enforceable(
    schema: Any, path: str, validator: jsonschema.protocols.Validator, strict: bool, param: str | None
) -> None:
    """Rewrite `schema` in place (see enforceable_schema); `validator` resolves `$ref`s against the root."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            _make_enforceable(item, f"{path}/{index}", validator, strict, param)
        return
    if not isinstance(schema, dict):
        return
    where = path or "/"
    if "enum" in schema or "const" in schema:
        _filter_enum(schema, where, validator, param)
    required = schema.get("required")
    if isinstance(required, list):
        _declare_required(schema, required, where, strict, param)
    for key, value in schema.items():
        if key in _NOT_SUBSCHEMAS:
            continue
        if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            for name, subschema in value.items():
                _make_enforceable(subschema, f"{path}/{key}/{name}", validator, strict, param)
        elif isinstance(value, dict | list):
            _make_enforceable(value, f"{path}/{key}", validator, strict, param)


def _filter_enum(
    schema: dict[str, Any], where: str, validator: jsonschema.protocols.Validator, param: str | None
) -> None:
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if not isinstance(values, list):
        return
    siblings = validator.evolve(schema={k: v for k, v in schema.items() if k not in ("enum", "const")})
    kept = [v for v in values if siblings.is_valid(v)]
    if not kept:
        raise InvalidRequestError(
            f"unsatisfiable JSON schema: no value of 'enum'/'const' at {where} matches its sibling keywords",
            param=param,
        )
    schema.pop("const", None)
    schema["enum"] = kept


def _declare_required(
    schema: dict[str, Any], required: list[Any], where: str, strict: bool, param: str | None
) -> None:
    properties = schema.get("properties")
    declared = properties if isinstance(properties, dict) else {}
    missing = [name for name in required if isinstance(name, str) and name not in declared]
    if not missing:
        return
    if schema.get("patternProperties"):
        raise InvalidRequestError(
            f"unsupported JSON schema: required '{missing[0]}' at {where} is declared only through "
            "patternProperties, which the xgrammar backend does not enforce for required names",
            param=param,
        )
    additional = schema.get("additionalProperties", not strict)
    if additional is False:
        raise InvalidRequestError(
            f"unsatisfiable JSON schema: required '{missing[0]}' at {where} is not in properties and "
            "additional properties are not allowed",
            param=param,
        )
    extra = additional if isinstance(additional, dict) else {}
    schema["properties"] = {**declared, **{name: copy.deepcopy(extra) for name in missing}}


_XGRAMMAR_LOG_PREFIX = re.compile(r"^\[[\d:]+\] \S+?:\d+: (Check failed: \(.*?\) is false: )?")


def xgrammar_message(exc: BaseException) -> str:
    """The first line of an xgrammar error without its log prefix (time, C++ source file and line)."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return _XGRAMMAR_LOG_PREFIX.sub("", text.splitlines()[0]) or type(exc).__name__


def _describe(kind: str) -> str:
    return {
        "json": "JSON schema",
        "json_object": "JSON object grammar",
        "regex": "regex",
        "choice": "choice list",
        "grammar": "EBNF grammar",
        "structural_tag": "structural tag",
    }[kind]
