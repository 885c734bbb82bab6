"""A freshly initialised bundled model: its Llama from a shape, the wired copy circuit, its size."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer

from switchyard_training.induction_init import (
    CircuitGuard,
    InductionInit,
    SpaceVariants,
    install_induction_circuit,
)
from switchyard_training.recipe import ModelShape


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (tied embedding counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def build_model(
    shape: ModelShape,
    vocab_size: int,
    eos_token_id: int,
    pad_token_id: int,
    seed: int,
    induction: InductionInit | None = None,
    space_variants: SpaceVariants | None = None,
) -> Any:
    """A freshly initialised model; with `induction`, layers 0-1 start with a wired copy circuit."""
    return build_guarded_model(
        shape, vocab_size, eos_token_id, pad_token_id, seed, induction, space_variants
    )[0]


def build_guarded_model(
    shape: ModelShape,
    vocab_size: int,
    eos_token_id: int,
    pad_token_id: int,
    seed: int,
    induction: InductionInit | None = None,
    space_variants: SpaceVariants | None = None,
) -> tuple[Any, CircuitGuard | None]:
    """`build_model`, plus the guard that keeps a protected wired circuit fixed in `train_model`."""
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(shape.llama_config(vocab_size, eos_token_id, pad_token_id))
    guard = None
    if induction is not None:
        guard = install_induction_circuit(model, replace(induction, seed=seed), space_variants)
    return model, guard


def padded_vocab_size(tokenizer: Tokenizer, multiple: int = 64) -> int:
    """Embedding rows: the tokenizer's size rounded up, as matrix kernels prefer round sizes."""
    return -(-tokenizer.get_vocab_size() // multiple) * multiple
