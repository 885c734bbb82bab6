"""The llguidance backend: the `auto` backend's engine for JSON schemas xgrammar approximates, or all specs with
`--structured-outputs-backend llguidance`.

Same JSON conventions as the xgrammar backend (fixed ", " / ": " separators, no free whitespace). Structural
tags are xgrammar's format and are not supported here; tool calling needs the xgrammar backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import xgrammar as xgr

from switchyard.engine.structured.params import StructuredOutputsParams, parse_json_schema
from switchyard.engine.structured.xgrammar import apply_bitmask
from switchyard.errors import InvalidRequestError

_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class LLGuidanceMatcher:
    """llguidance stops as soon as only EOS may follow; Switchyard's matchers terminate once EOS is accepted
    (so the last real token is still detokenized), hence the extra bookkeeping."""

    def __init__(self, matcher: Any, stop_token_ids: frozenset[int]) -> None:
        self.matcher = matcher
        self.stop_token_ids = stop_token_ids
        self.accepted: list[int] = []

    def accept_token(self, token_id: int) -> bool:
        if not self.matcher.consume_token(token_id):
            return False
        self.accepted.append(token_id)
        return True

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)
        del self.accepted[len(self.accepted) - num_tokens :]

    def is_terminated(self) -> bool:
        return (
            bool(self.accepted)
            and self.accepted[-1] in self.stop_token_ids
            and bool(self.matcher.is_stopped())
        )


class LLGuidanceBackend:
    name = "llguidance"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        import llguidance
        import llguidance.hf

        self._llg = llguidance
        self.vocab_size = vocab_size
        self.stop_token_ids = frozenset(stop_token_ids)
        self.tokenizer = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=vocab_size, eos_token=list(stop_token_ids)
        )

    def compile(self, spec: StructuredOutputsParams) -> str:
        matcher_cls = self._llg.LLMatcher
        kind = spec.kind
        try:
            if kind == "json":
                schema = parse_json_schema(spec)
                if spec.strict and isinstance(schema, dict):
                    schema = {**schema, "additionalProperties": schema.get("additionalProperties", False)}
                grammar = matcher_cls.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS)
            elif kind == "json_object":
                grammar = matcher_cls.grammar_from_json_schema({"type": "object"}, defaults=_JSON_OPTIONS)
            elif kind == "regex":
                grammar = matcher_cls.grammar_from_regex(spec.regex)
            elif kind == "choice":
                grammar = matcher_cls.grammar_from_regex(
                    "|".join(_regex_escape(c) for c in spec.choice or ())
                )
            elif kind == "grammar":
                grammar = matcher_cls.grammar_from_lark(self._llg.gbnf_to_lark(spec.grammar))
            else:
                raise InvalidRequestError("structural tags need the xgrammar backend", param=spec.param)
        except InvalidRequestError:
            raise
        except Exception as exc:
            raise InvalidRequestError(f"invalid {kind} grammar: {exc}", param=spec.param) from exc
        is_error, messages = matcher_cls.validate_grammar_with_warnings(grammar, self.tokenizer)
        if is_error:
            raise InvalidRequestError(f"unsupported or invalid {kind}: {messages[0]}", param=spec.param)
        return grammar

    def new_matcher(self, compiled: str) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(
            self._llg.LLMatcher(self.tokenizer, compiled, log_level=0), self.stop_token_ids
        )

    def allocate_bitmask(self, rows: int) -> torch.Tensor:
        return xgr.allocate_token_bitmask(rows, self.vocab_size)

    def fill_bitmask(self, matchers: Sequence[Any], bitmask: torch.Tensor, rows: list[int]) -> None:
        for matcher, row in zip(matchers, rows, strict=True):
            view = bitmask[row]
            matcher.matcher.unsafe_compute_mask_ptr(view.data_ptr(), view.numel() * view.element_size())

    def apply_bitmask(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        # Same bit layout as xgrammar's, so its kernel applies llguidance's masks too.
        apply_bitmask(logits, bitmask, rows, self.vocab_size)


def _regex_escape(text: str) -> str:
    """Escape for llguidance's (Rust regex) syntax: its meta characters get a backslash."""
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


_REGEX_META = set("\\.+*?()|[]{}^$#&-~")
