"""The wired copy circuit works at initialisation: prev-token attention, then induction copying."""

from __future__ import annotations

import pytest
import torch

from switchyard_training.data import PackedRows
from switchyard_training.induction_init import CircuitGuard, InductionInit, SpaceVariants
from switchyard_training.model_builder import build_guarded_model, build_model
from switchyard_training.recipe import DRAFT_SHAPE, ModelShape, TrainConfig
from switchyard_training.train_loop import train_model
from tests.training.factory import WIRED_TINY_SHAPE

VOCAB = 512
SHAPE = WIRED_TINY_SHAPE
DRAFT_WIRED = DRAFT_SHAPE  # already rope_theta 5e5, as the circuit wants


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


def previous_and_induction_attention(model: torch.nn.Module) -> tuple[float, float]:
    """Mean attention of layer-0 head 0 one position back, and of layer-1 head 0 on the induction target."""
    ids, _ = repeated_sequences(2, 60, seed=3)
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    model.config._attn_implementation = "sdpa"
    positions = torch.arange(1, 120)
    second = torch.arange(60, 119)
    return (
        float(attentions[0][:, 0, positions, positions - 1].mean()),
        float(attentions[1][:, 0, second, second - 59].mean()),
    )


def train_steps(model: torch.nn.Module, guard: CircuitGuard | None, steps: int) -> None:
    """AdamW at the recipe's peak learning rate on next-token loss over random rows (nothing to copy)."""
    rows = torch.randint(8, VOCAB, (steps, 2, 128), generator=torch.Generator().manual_seed(4))
    positions = torch.arange(128).expand(2, 128)
    labels = rows.clone()
    config = TrainConfig(max_steps=steps, batch_rows=2, row_len=128, lr=3e-3, warmup_steps=1,
                         bf16_autocast=False)  # fmt: skip
    packed = PackedRows(input_ids=rows.flatten(0, 1), position_ids=positions.repeat(steps, 1),
                        labels=labels.flatten(0, 1), row_tokens=torch.full((2 * steps,), 128), num_examples=2 * steps,
                        num_dropped=0)  # fmt: skip
    train_model(model, packed, config, progress=False, guard=guard)


def test_guard_keeps_the_circuit_fixed_while_the_rest_trains() -> None:
    model, guard = build_guarded_model(SHAPE, VOCAB, 1, 0, seed=0, induction=InductionInit())
    assert guard is not None and guard.num_fixed > 0
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    train_steps(model, guard, steps=3)
    for param, mask, values in guard.entries:
        torch.testing.assert_close(param.detach()[mask], values, rtol=0, atol=0)
    moved = [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert "model.layers.1.mlp.up_proj.weight" in moved and "model.embed_tokens.weight" in moved
    assert not any(hook for hook in model.model.embed_tokens.weight._backward_hooks or {})  # hooks removed


def test_unprotected_init_has_no_guard() -> None:
    _, guard = build_guarded_model(SHAPE, VOCAB, 1, 0, seed=0, induction=InductionInit(protect=False))
    assert guard is None


@pytest.mark.parametrize(
    ("init", "survives"),
    [
        (InductionInit(), True),
        (InductionInit(embedding_scale=1.0, prev_strength=35.0, residual_scale=0.25), False),
    ],
    ids=["scaled-embeddings", "transformers-scale-embeddings"],
)
def test_circuit_survives_training_only_on_scaled_embeddings(init: InductionInit, survives: bool) -> None:
    """The guard fixes the circuit's weights, but its attention patterns also depend on the residual stream
    it reads: at transformers' 0.02 embedding scale, 40 AdamW steps grow the rest of the stream enough to
    break them (measured on the real corpus: previous-token attention 1.0 -> 0.63, induction 0.96 -> 0.04 in
    50 steps); at 50x they hold."""
    model, guard = build_guarded_model(SHAPE, VOCAB, 1, 0, seed=0, induction=init)
    assert min(previous_and_induction_attention(model)) > 0.9
    train_steps(model, guard, steps=40)
    previous, induction = previous_and_induction_attention(model)
    if survives:
        assert previous > 0.9 and induction > 0.8
    else:
        assert induction < 0.5


def test_space_variants_pair_spaced_and_bare_tokens_of_a_vocabulary() -> None:
    vocab = {"\u0120Oslo": 0, "Oslo": 1, "\u0120the": 2, "\u0120": 3, "Ch": 4, "\u0120Ch": 5, "x": 6}
    variants = SpaceVariants.from_vocab(vocab)
    assert variants.spaced == [0, 2, 5]  # the bare space itself is no word
    assert variants.pairs == [(0, 1), (5, 4)]


@pytest.mark.parametrize("paired", [True, False])
def test_paired_variants_let_the_circuit_copy_from_spaced_to_bare_text(paired: bool) -> None:
    """A name copied from a sentence (" Oslo") into JSON ("Oslo") changes its first token; the circuit must
    still continue with what followed the spaced form in the prompt."""
    half = VOCAB // 2
    variants = SpaceVariants(spaced=list(range(8, half)), pairs=[(i, i + half - 8) for i in range(8, half)])
    model = build_model(
        SHAPE, VOCAB, 1, 0, seed=0, induction=InductionInit(), space_variants=variants if paired else None
    )
    generator = torch.Generator().manual_seed(6)
    bare = torch.randint(half, VOCAB - 8, (4, 60), generator=generator)
    spaced = bare - (half - 8)
    ids = torch.cat([spaced, bare], dim=1)  # the prompt has the spaced forms; the reply writes bare ones
    with torch.no_grad():
        predicted = model(input_ids=ids, use_cache=False).logits[:, 60:-1].argmax(-1)
    wanted = bare[:, 1:]
    hits = (predicted == wanted) | (predicted == wanted - (half - 8))  # either form of the right token
    accuracy = float(hits.float().mean())
    assert accuracy > 0.7 if paired else accuracy < 0.1  # measured: 0.79 and 0.03


LOCATOR_SHAPE = ModelShape(
    hidden_size=256,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    rope_theta=5e5,
)
"""The main model's head layout (head_dim 64, 2 kv heads) with a locator layer after the wired ones."""


@torch.no_grad()
def test_locator_head_copies_whatever_its_attention_finds() -> None:
    """A locator head has the copy value and output fixed and its attention free: handed the induction head's
    query and key, it copies repeated text on its own, with the wired induction head silenced."""
    model = build_model(LOCATOR_SHAPE, VOCAB, 1, 0, seed=0, induction=InductionInit(locator_layers=(2,)))
    ids, targets = repeated_sequences(4, 80, seed=2)
    head_dim = 64
    induction, locator = model.model.layers[1].self_attn, model.model.layers[2].self_attn
    induction.o_proj.weight[:, :head_dim] = 0.0  # silence the wired induction head
    assert copy_accuracy(model, ids, targets) < 0.2
    for head in (2, 3):  # the query heads of kv head 1
        locator.q_proj.weight[head * head_dim : (head + 1) * head_dim] = induction.q_proj.weight[:head_dim]
    locator.k_proj.weight[head_dim : 2 * head_dim] = induction.k_proj.weight[:head_dim]
    assert copy_accuracy(model, ids, targets) > 0.8


def test_guard_holds_locator_copy_path_while_its_attention_trains() -> None:
    init = InductionInit(locator_layers=(2,))
    model, guard = build_guarded_model(LOCATOR_SHAPE, VOCAB, 1, 0, seed=0, induction=init)
    locator = model.model.layers[2].self_attn
    value, output, query = (p.detach().clone() for p in (locator.v_proj.weight, locator.o_proj.weight,
                                                         locator.q_proj.weight))  # fmt: skip
    assert guard is not None
    train_steps(model, guard, steps=3)
    torch.testing.assert_close(locator.v_proj.weight[64:128], value[64:128], rtol=0, atol=0)
    torch.testing.assert_close(locator.o_proj.weight[:, 128:], output[:, 128:], rtol=0, atol=0)
    assert not torch.equal(locator.q_proj.weight[128:], query[128:])  # its attention learns
    assert not torch.equal(locator.v_proj.weight[:64], value[:64])  # the other kv head is untouched


@pytest.mark.parametrize(
    ("shape", "layers", "message"),
    [
        (SHAPE, (1,), "2\\+ kv heads"),
        (LOCATOR_SHAPE, (1,), "after the wired"),
        (LOCATOR_SHAPE, (3,), "after"),
    ],
)
def test_bad_locator_layers_are_refused(shape: ModelShape, layers: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_model(shape, VOCAB, 1, 0, seed=0, induction=InductionInit(locator_layers=layers))


@pytest.mark.parametrize("shape", [SHAPE, DRAFT_WIRED, LOCATOR_SHAPE])
def test_bigram_context_copies_text_made_of_few_distinct_tokens(shape: ModelShape) -> None:
    """Names split into common pieces and numbers into digits: one token of context matches many earlier
    places, two pin the right one down (a 24-token alphabet, 60 tokens, copied)."""
    generator = torch.Generator().manual_seed(8)
    first = torch.randint(8, 32, (4, 60), generator=generator)
    ids = torch.cat([first, first], dim=1)
    targets = torch.full_like(ids, -100)
    targets[:, 61:-1] = ids[:, 62:]  # from the second copied token on, two tokens of context exist
    one = build_model(shape, VOCAB, 1, 0, seed=0, induction=InductionInit(bigram_dims=0))
    two = build_model(shape, VOCAB, 1, 0, seed=0, induction=InductionInit())
    unigram, bigram = copy_accuracy(one, ids, targets), copy_accuracy(two, ids, targets)
    assert bigram > 0.8 and bigram > unigram + 0.3, (unigram, bigram)  # measured: 0.94 and 0.35
