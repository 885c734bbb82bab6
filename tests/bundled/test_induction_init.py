"""The wired copy circuit works at initialisation: prev-token attention, then induction copying."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from switchyard.bundled.induction_init import InductionInit
from switchyard.bundled.train import DRAFT_SHAPE, ModelShape, build_model

VOCAB = 512
SHAPE = ModelShape(
    hidden_size=192,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=3,
    num_key_value_heads=1,
    rope_theta=5e5,
)
DRAFT_WIRED = replace(DRAFT_SHAPE, rope_theta=5e5)


def repeated_sequences(rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens followed by the same tokens again; only the second copy is predictable."""
    generator = torch.Generator().manual_seed(seed)
    first = torch.randint(8, VOCAB, (rows, length), generator=generator)
    ids = torch.cat([first, first], dim=1)
    targets = torch.full_like(ids, -100)
    targets[:, length:-1] = ids[:, length + 1 :]
    return ids, targets


def copy_accuracy(model: torch.nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits
    selected = targets != -100
    return float((logits[selected].argmax(-1) == targets[selected]).float().mean())


def test_previous_token_head_attends_one_position_back() -> None:
    model = build_model(SHAPE, VOCAB, 1, 0, seed=0, induction=InductionInit())
    model.config._attn_implementation = "eager"
    ids, _ = repeated_sequences(2, 60, seed=1)
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    positions = torch.arange(1, ids.shape[1])
    on_previous = attentions[0][:, 0, positions, positions - 1]
    assert on_previous.mean() > 0.9


@pytest.mark.parametrize("shape", [SHAPE, DRAFT_WIRED])
def test_wired_model_copies_repeated_text_before_any_training(shape: ModelShape) -> None:
    ids, targets = repeated_sequences(4, 80, seed=2)
    wired = build_model(shape, VOCAB, 1, 0, seed=0, induction=InductionInit())
    plain = build_model(shape, VOCAB, 1, 0, seed=0)
    assert copy_accuracy(wired, ids, targets) > 0.8
    assert copy_accuracy(plain, ids, targets) < 0.05


def test_too_small_shapes_are_refused() -> None:
    small = ModelShape(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    with pytest.raises(ValueError, match="induction circuit needs"):
        build_model(small, VOCAB, 1, 0, seed=0, induction=InductionInit())
