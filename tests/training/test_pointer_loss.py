"""The copy-start attention loss: which reply tokens it supervises, and that its attention is the model's."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import transformers

from switchyard_training.data import IGNORE_INDEX, pack_examples, tokenize_examples
from switchyard_training.induction_init import CircuitGuard, InductionInit, SpaceVariants
from switchyard_training.model_builder import build_guarded_model, padded_vocab_size
from switchyard_training.pipeline import pointer_supervision
from switchyard_training.pointer_loss import PointerSupervision
from switchyard_training.recipe import DefaultRecipe, ModelShape, TrainConfig
from switchyard_training.train_loop import train_model


def _supervision(vocab: int = 40, pairs: list[tuple[int, int]] | None = None, **kwargs) -> PointerSupervision:
    return PointerSupervision.for_vocab((1,), 2, 0.1, vocab, pairs or [], **kwargs)


def _batch(tokens: list[int], reply_from: int, positions: list[int] | None = None):
    ids = torch.tensor([tokens])
    labels = ids.clone()
    labels[0, :reply_from] = IGNORE_INDEX
    pos = torch.tensor([positions if positions is not None else list(range(len(tokens)))])
    return ids, pos, labels


def test_a_reply_span_found_in_the_prompt_is_supervised_at_its_start_only() -> None:
    # prompt: 1 7 8 9 2 | 3 7 8 9 4 ; reply: 5 7 8 9 6 -> copy starts at the reply's 7 (sources: columns 1, 6)
    tokens = [1, 7, 8, 9, 2, 3, 7, 8, 9, 4, 5, 7, 8, 9, 6]
    targets = _supervision().targets(*_batch(tokens, reply_from=10))
    assert targets.count == 1
    assert int(targets.queries[0]) == 10  # the query predicting column 11
    # both places match the reply's span equally long (7 8 9): both are sources
    assert targets.sources[0].nonzero().flatten().tolist() == [1, 6]
    assert targets.visible[0].nonzero().flatten().tolist() == list(range(11))


def test_the_sources_are_where_the_copied_span_matches_longest() -> None:
    # "7 8" starts twice in the prompt, "7 8 9" once: the reply "7 8 9" copies from the second place
    tokens = [1, 7, 8, 2, 3, 7, 8, 9, 4, 5, 7, 8, 9, 6]
    targets = _supervision().targets(*_batch(tokens, reply_from=9))
    assert targets.count == 1 and targets.sources[0].nonzero().flatten().tolist() == [5]


def test_continuations_single_tokens_boilerplate_and_excluded_tokens_are_not_supervised() -> None:
    # the reply's 7 8 follows 2, as in the prompt: the induction head continues it, no start
    assert _supervision().targets(*_batch([2, 7, 8, 3, 2, 7, 8], reply_from=5)).count == 0
    # a single shared token is no span
    assert _supervision().targets(*_batch([1, 7, 3, 4, 5, 7, 6], reply_from=4)).count == 0
    # found more often than max_sources
    many = [7, 8, 1] * 9
    assert _supervision().targets(*_batch([*many, 5, 7, 8], reply_from=len(many))).count == 0
    assert (
        _supervision(excluded=frozenset({7})).targets(*_batch([1, 7, 8, 3, 5, 7, 8], reply_from=4)).count == 0
    )


def test_spaced_and_bare_pieces_match() -> None:
    # 20 is the spaced form of 7: the prompt's " 7 8" is the source of the reply's bare "7 8"
    targets = _supervision(pairs=[(20, 7)]).targets(*_batch([1, 20, 8, 3, 5, 7, 8], reply_from=4))
    assert targets.count == 1 and targets.sources[0].nonzero().flatten().tolist() == [1]


def test_packed_rows_keep_examples_apart_and_continuations_see_their_prefix() -> None:
    # row: example A (positions 0-4), example B (0-3), B's group member (positions 3-5, after B's first 3 tokens)
    tokens = [1, 7, 8, 3, 5, 2, 7, 8, 3, 9, 7, 8]
    positions = [0, 1, 2, 3, 4, 0, 1, 2, 3, 3, 4, 5]
    ids, pos, labels = _batch(tokens, reply_from=0, positions=positions)
    labels[0] = IGNORE_INDEX
    labels[0, 10:12] = ids[0, 10:12]  # the member's reply "7 8"
    targets = _supervision().targets(ids, pos, labels)
    assert targets.count == 1
    # its query (column 9) sees B's prefix (columns 5-7) and itself; the source is B's 7, not A's
    assert int(targets.queries[0]) == 9
    assert targets.visible[0].nonzero().flatten().tolist() == [5, 6, 7, 9]
    assert targets.sources[0].nonzero().flatten().tolist() == [6]


def test_loss_is_minus_log_of_the_models_own_attention_mass() -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=40, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      rope_theta=5e5, attn_implementation="eager")  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    tokens = [1, 7, 8, 9, 2, 3, 7, 8, 9, 4, 5, 7, 8, 9, 6]
    ids, pos, labels = _batch(tokens, reply_from=10)
    supervision = _supervision()
    targets = supervision.targets(ids, pos, labels)
    with supervision.capture(model) as captured:
        out = model(input_ids=ids, position_ids=pos, output_attentions=True)
    loss = supervision.loss(model, captured, targets)
    attention = out.attentions[1][0, 2, int(targets.queries[0])]  # layer 1, head 2
    expected = -torch.log(attention[targets.sources[0]].sum())
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    loss.backward()
    assert model.model.layers[1].self_attn.q_proj.weight.grad.abs().sum() > 0


_LOCATOR_SHAPE = ModelShape(hidden_size=256, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                            num_key_value_heads=2, rope_theta=5e5)  # fmt: skip


def _locator_supervision(tokenizer, locator_layers: tuple[int, ...] = (2,)) -> PointerSupervision | None:
    """What `pointer_supervision` gives the recipe's wiring on `_LOCATOR_SHAPE` with these locator layers."""
    recipe = replace(DefaultRecipe(), main_shape=_LOCATOR_SHAPE, main_locator_layers=locator_layers)
    induction = replace(InductionInit(), locator_layers=locator_layers)
    variants = SpaceVariants.from_vocab(tokenizer.get_vocab())
    return pointer_supervision(
        recipe, _LOCATOR_SHAPE, induction, padded_vocab_size(tokenizer), variants, tokenizer
    )


def _locator_model(tokenizer) -> tuple[torch.nn.Module, CircuitGuard | None, PointerSupervision]:
    """The recipe's wiring on a 3-layer model with its locator in layer 2, and that locator's supervision."""
    induction = replace(InductionInit(), locator_layers=(2,))
    variants = SpaceVariants.from_vocab(tokenizer.get_vocab())
    model, guard = build_guarded_model(
        _LOCATOR_SHAPE, padded_vocab_size(tokenizer), 1, 0, 0, induction, variants
    )
    pointer = _locator_supervision(tokenizer)
    assert pointer is not None
    return model, guard, pointer


def test_training_with_it_teaches_the_locator_head_where_copies_start(
    bundled_tokenizer, bundled_corpus
) -> None:
    """The recipe's wiring on a 3-layer model (locator in layer 2) and the real corpus: the supervised head's
    attention mass on copy sources grows within a few steps, and the result reports the loss."""
    model, guard, pointer = _locator_model(bundled_tokenizer)
    assert pointer.layers == (2,) and pointer.head == 2
    rows = pack_examples(tokenize_examples(bundled_tokenizer, bundled_corpus[:200]), row_len=768, pad_id=0)
    batch = rows.input_ids[:2], rows.position_ids[:2], rows.labels[:2]
    targets = pointer.targets(*batch)
    assert targets.count >= 8

    def measured() -> float:
        with torch.no_grad(), pointer.capture(model) as captured:
            model(input_ids=batch[0], position_ids=batch[1])
            return float(pointer.loss(model, captured, targets))

    before = measured()
    config = TrainConfig(max_steps=20, batch_rows=2, lr=3e-3, warmup_steps=2)
    result = train_model(
        model, rows, config, progress=False, guard=guard, pointer=replace(pointer, weight=1.0)
    )
    assert result.final_pointer_loss is not None and math.isfinite(result.final_pointer_loss)
    after = measured()
    assert after < before - 1.0, (before, after)
    # without locator heads there is nothing to supervise
    assert _locator_supervision(bundled_tokenizer, locator_layers=()) is None


def test_contested_continuations_point_at_the_source_that_goes_on_longest() -> None:
    # prompt: 1 A B 2 3 9 | A B 4 5 9 ; reply: 6 A B 4 5 7. After "A B" the prompt goes on with 2 and with 4:
    # the reply's 4 is contested, and its source is the 4 at column 8, not only "a place after A B".
    a, b = 10, 11
    tokens = [1, a, b, 2, 3, 9, a, b, 4, 5, 9, 6, a, b, 4, 5, 7]
    batch = _batch(tokens, reply_from=11)
    plain = _supervision().targets(*batch)
    assert plain.queries.tolist() == [11]  # the copy start only
    targets = replace(_supervision(), continuations=True).targets(*batch)
    assert targets.queries.tolist() == [11, 13]
    # the copy start's source too is where the reply's span goes on longest
    assert plain.sources[0].nonzero().flatten().tolist() == [6]
    assert targets.sources[0].nonzero().flatten().tolist() == [6]
    assert targets.sources[1].nonzero().flatten().tolist() == [8]


def test_rows_masked_out_of_copy_starts_give_the_loss_nothing(bundled_tokenizer, bundled_corpus) -> None:
    """`PackedRows.copy_start_mask` (drills left out) reaches the loss: fully masked rows supervise no query,
    though their replies still train the language-model loss."""
    model, guard, pointer = _locator_model(bundled_tokenizer)
    rows = pack_examples(tokenize_examples(bundled_tokenizer, bundled_corpus[:100]), row_len=768, pad_id=0)
    assert pointer.targets(rows.input_ids[:2], rows.position_ids[:2], rows.labels[:2]).count > 0
    masked = replace(rows, copy_start_mask=torch.zeros_like(rows.input_ids, dtype=torch.bool))
    config = TrainConfig(max_steps=2, batch_rows=2, lr=3e-3, warmup_steps=1)
    result = train_model(model, masked, config, progress=False, guard=guard, pointer=pointer)
    assert result.final_pointer_loss == 0.0
    assert result.final_loss > 0
