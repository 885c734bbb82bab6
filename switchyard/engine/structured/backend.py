"""The grammar backend interface the engine programs against, and the factory that picks one by name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from switchyard.engine.structured.params import StructuredOutputsParams


class CompiledGrammar(Protocol):
    """A backend's compiled grammar: immutable, shared by every matcher made from it."""


class GrammarMatcher(Protocol):
    """One sequence's position in its grammar."""

    def accept_token(self, token_id: int) -> bool:
        """Advance by one sampled token; False (state unchanged) when the grammar forbids it."""
        ...

    def rollback(self, num_tokens: int) -> None:
        """Un-accept the last `num_tokens` tokens (speculative decoding's rejected proposals)."""
        ...

    def is_terminated(self) -> bool:
        """The grammar is complete and its stop token accepted: nothing more may be generated."""
        ...


class GrammarBackend(Protocol):
    """A grammar library behind the engine: compiles specs, makes matchers, fills and applies bitmasks."""

    name: str

    def compile(self, spec: StructuredOutputsParams) -> CompiledGrammar:
        """Compile or raise InvalidRequestError naming the problem. May run on any thread."""
        ...

    def new_matcher(self, compiled: CompiledGrammar) -> GrammarMatcher: ...

    def allocate_bitmask(self, rows: int) -> torch.Tensor: ...

    def fill_bitmask(
        self, matchers: Sequence[GrammarMatcher], bitmask: torch.Tensor, rows: list[int]
    ) -> None:
        """Write the allowed next tokens of `matchers[i]` into `bitmask[rows[i]]`."""
        ...

    def apply_bitmask(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        """Set logits[rows] of forbidden tokens to -inf, in place."""
        ...


def create_backend(
    name: str, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]
) -> GrammarBackend:
    """The named backend for this tokenizer: `auto` (default: each spec to the library that enforces it
    exactly), `xgrammar` or `llguidance`."""
    if name == "auto":
        from switchyard.engine.structured.auto import AutoBackend

        return AutoBackend(tokenizer, vocab_size, stop_token_ids)
    if name == "xgrammar":
        from switchyard.engine.structured.xgrammar import XGrammarBackend

        return XGrammarBackend(tokenizer, vocab_size, stop_token_ids)
    if name == "llguidance":
        from switchyard.engine.structured.llguidance import LLGuidanceBackend

        return LLGuidanceBackend(tokenizer, vocab_size, stop_token_ids)
    raise ValueError(f"unknown structured-output backend {name!r}; choose auto, xgrammar or llguidance")
