from __future__ import annotations

import pytest
import torch
import transformers
from tokenizers import Tokenizer

from switchyard_training import train_loop
from switchyard_training.data import pack_examples, tokenize_examples
from switchyard_training.example import Example
from switchyard_training.model_builder import build_model
from switchyard_training.packed_attention import PACKED_SDPA, packed_segments
from switchyard_training.recipe import ModelShape, TrainConfig
from switchyard_training.train_loop import assistant_loss, train_model

SHAPE = ModelShape(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2)  # fmt: skip


def _packed_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, 256, (3, 40), generator=generator)
    position_ids = torch.stack(
        [
            torch.cat([torch.arange(12), torch.arange(20), torch.arange(8)]),
            torch.arange(40),
            torch.cat([torch.arange(1), torch.arange(39)]),
        ]
    )
    labels = input_ids.clone()
    labels[:, ::3] = -100
    return input_ids, position_ids, labels


def test_segment_lengths_follow_position_restarts() -> None:
    _, position_ids, _ = _packed_batch()
    assert packed_segments(position_ids).lengths == [12, 20, 8, 40, 1, 39]
    # A jump that is not a restart to 0 also starts an example (transformers' rule).
    assert packed_segments(torch.tensor([[0, 1, 2, 7, 8, 9]])).lengths == [3, 3]


def test_packed_attention_matches_the_masked_row_in_values_and_gradients() -> None:
    input_ids, position_ids, labels = _packed_batch()
    model = build_model(SHAPE, 256, 1, 0, seed=0)
    losses, grads = [], []
    for implementation in ("sdpa", PACKED_SDPA):
        model.set_attn_implementation(implementation)
        model.zero_grad()
        loss = assistant_loss(model, input_ids, position_ids, labels)
        loss.backward()
        losses.append(loss.detach())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_packed_attention_does_not_leak_across_examples() -> None:
    """Changing the first example leaves the second one's hidden states untouched."""
    input_ids, position_ids, _ = _packed_batch()
    model = build_model(SHAPE, 256, 1, 0, seed=0)
    model.set_attn_implementation(PACKED_SDPA)
    lengths = packed_segments(position_ids).lengths
    changed = input_ids.clone()
    changed[0, :12] = (changed[0, :12] + 1) % 256
    with torch.no_grad():
        before = model.model(input_ids=input_ids, position_ids=position_ids, segment_lengths=lengths)
        after = model.model(input_ids=changed, position_ids=position_ids, segment_lengths=lengths)
    torch.testing.assert_close(before.last_hidden_state[0, 12:], after.last_hidden_state[0, 12:])
    assert not torch.allclose(before.last_hidden_state[0, :12], after.last_hidden_state[0, :12])


def test_packed_attention_needs_segment_lengths_that_cover_the_batch() -> None:
    input_ids, position_ids, _ = _packed_batch()
    model = build_model(SHAPE, 256, 1, 0, seed=0)
    model.set_attn_implementation(PACKED_SDPA)
    with pytest.raises(ValueError, match="segment_lengths"):
        model.model(input_ids=input_ids, position_ids=position_ids)
    with pytest.raises(ValueError, match="sum to"):
        model.model(input_ids=input_ids, position_ids=position_ids, segment_lengths=[10, 10])


def test_training_uses_packed_attention_then_switches_back(
    bundled_tokenizer: Tokenizer, bundled_corpus: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = pack_examples(tokenize_examples(bundled_tokenizer, bundled_corpus[:40]), row_len=768, pad_id=0)
    model = build_model(SHAPE, 1280, 2, 0, seed=0)
    seen: list[str] = []
    original = train_loop.assistant_loss

    def spy(model: transformers.PreTrainedModel, *args: object) -> torch.Tensor:
        seen.append(model.config._attn_implementation)
        return original(model, *args)

    monkeypatch.setattr(train_loop, "assistant_loss", spy)
    train_model(model, rows, TrainConfig(max_steps=2, batch_rows=2), progress=False)
    assert seen == [PACKED_SDPA, PACKED_SDPA]
    assert model.config._attn_implementation == "sdpa"
    train_model(model, rows, TrainConfig(max_steps=1, batch_rows=2, packed_attention=False), progress=False)
    assert seen[-1] == "sdpa"
