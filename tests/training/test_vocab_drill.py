"""Vocabulary drills: every word piece the tokenizer holds becomes a reply token often enough."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from switchyard_training.data import TokenizedExample, tokenize_examples
from switchyard_training.example import Category, Example
from switchyard_training.model_card import reproduce_command
from switchyard_training.pipeline import prepare_data
from switchyard_training.train import build_parser
from switchyard_training.vocab_drill import reply_counts, starved_pieces, vocabulary_drills
from tests.training.factory import tiny_recipe


def test_reply_counts_count_only_trained_tokens() -> None:
    examples = [
        TokenizedExample(ids=[1, 2, 3, 3], loss_mask=[False, True, True, True]),
        TokenizedExample(ids=[2, 4], loss_mask=[True, False]),
    ]
    assert reply_counts(examples, 6) == [0, 0, 2, 2, 0, 0]


def test_starved_pieces_are_word_pieces_below_the_count(
    bundled_corpus: list[Example], bundled_tokenizer: Tokenizer
) -> None:
    counts = reply_counts(
        tokenize_examples(bundled_tokenizer, bundled_corpus), bundled_tokenizer.get_vocab_size()
    )
    plan = starved_pieces(bundled_tokenizer, counts, min_count=5)
    assert plan.needed, "a 1200-piece vocabulary trained on 400 conversations has pieces replies never use"
    for token_id, needed in plan.needed.items():
        assert counts[token_id] < 5 and needed == 5 - counts[token_id]
        text = bundled_tokenizer.decode([token_id]).lstrip(" ")
        assert text.isalnum(), f"punctuation or control piece {text!r} planned"
    assert bundled_tokenizer.token_to_id("<|im_end|>") not in plan.needed
    common = max(range(len(counts)), key=counts.__getitem__)
    assert common not in plan.needed


def test_drills_bring_every_coverable_piece_to_the_count(
    bundled_corpus: list[Example], bundled_tokenizer: Tokenizer
) -> None:
    tokenizer, vocab = bundled_tokenizer, bundled_tokenizer.get_vocab_size()
    counts = reply_counts(tokenize_examples(tokenizer, bundled_corpus), vocab)
    plan = starved_pieces(tokenizer, counts, min_count=3)
    drills = vocabulary_drills(tokenizer, plan, seed=1)
    assert drills and all(d.category == Category.COPY for d in drills)
    for drill in drills:
        request, reply = drill.messages[0]["content"], drill.messages[1]["content"]
        assert reply in request, "a drill's reply copies its prompt"
    after = reply_counts(tokenize_examples(tokenizer, drills), vocab)
    covered = [t for t in plan.needed if counts[t] + after[t] >= 3]
    # a few pieces cannot stand in any word (a split that never produces them); nearly all can
    assert len(covered) >= 0.95 * len(plan.needed)
    assert vocabulary_drills(tokenizer, plan, seed=1) == drills, "deterministic for a seed"
    assert vocabulary_drills(tokenizer, replace(plan, needed={}), seed=1) == []


def test_prepare_data_adds_drills_unless_turned_off(tmp_path: Path) -> None:
    recipe = tiny_recipe()
    assert recipe.vocab_drill_min_count == 0, "off in the recipe"
    _, with_drills = prepare_data(replace(recipe, vocab_drill_min_count=24), 0, tmp_path / "a", resume=False)
    _, without = prepare_data(recipe, 0, tmp_path / "b", resume=False)
    assert (
        without.num_examples + without.num_dropped == recipe.corpus_size
    )  # the tiny rows leave a long one out
    assert with_drills.num_examples > without.num_examples


def test_drill_copy_starts_can_be_left_out_of_the_pointer_loss(tmp_path: Path) -> None:
    recipe = replace(tiny_recipe(), vocab_drill_min_count=24)
    assert recipe.drill_copy_starts, "supervised like any reply unless turned off"
    _, supervised = prepare_data(recipe, 0, tmp_path / "a", resume=False)
    assert supervised.copy_start_mask is None
    _, left_out = prepare_data(replace(recipe, drill_copy_starts=False), 0, tmp_path / "b", resume=False)
    _, no_drills = prepare_data(replace(recipe, vocab_drill_min_count=0), 0, tmp_path / "c", resume=False)
    mask = left_out.copy_start_mask
    assert mask is not None and torch.equal(left_out.input_ids, supervised.input_ids)
    drill_tokens = int(left_out.row_tokens.sum() - no_drills.row_tokens.sum())
    assert drill_tokens > 0 and int((~mask).sum()) == drill_tokens, "exactly the drills' tokens are left out"
    padding = torch.arange(mask.shape[1]) >= left_out.row_tokens[:, None]
    assert bool(mask[padding].all())


def test_drill_copy_starts_option_reproduces() -> None:
    recipe = replace(tiny_recipe(), vocab_drill_min_count=24, drill_copy_starts=False)
    command = reproduce_command(recipe, 0, 90)
    assert "--no-drill-copy-starts" in command
    assert build_parser().parse_args(command.split()[2:]).drill_copy_starts is False
    assert "drill-copy-starts" not in reproduce_command(replace(recipe, drill_copy_starts=True), 0, 90)


def test_vocab_drill_option_reproduces_and_rejects_negatives() -> None:
    assert "--vocab-drill-min-count" not in reproduce_command(tiny_recipe(), 0, 90)
    recipe = replace(tiny_recipe(), vocab_drill_min_count=24)
    command = reproduce_command(recipe, 0, 90)
    assert "--vocab-drill-min-count 24" in command
    assert build_parser().parse_args(command.split()[2:]).vocab_drill_min_count == 24
    with pytest.raises(SystemExit):
        from switchyard_training.train import main

        main(["--vocab-drill-min-count", "-1"])
