"""Shared-prefix groups: packed once, computed as if each conversation were alone."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer

from switchyard_training.corpus import CorpusConfig, generate_corpus
from switchyard_training.data import (
    IGNORE_INDEX,
    MIN_SHARED_PREFIX,
    TokenizedExample,
    pack_examples,
    pack_units,
    shared_prefix_length,
    tokenize_examples,
)
from switchyard_training.model_builder import build_model
from switchyard_training.packed_attention import PACKED_SDPA, packed_segments
from switchyard_training.recipe import ModelShape, TrainConfig
from switchyard_training.train_loop import assistant_loss, train_model

SHAPE = ModelShape(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2)  # fmt: skip


def _example(
    prefix: list[int], rest: list[int], group: int | None, trained_from: int = 2
) -> TokenizedExample:
    ids = prefix + rest
    mask = [False] * len(prefix) + [i >= trained_from for i in range(len(rest))]
    return TokenizedExample(ids=ids, loss_mask=mask, group=group)


def _members(group: int | None, count: int = 3, seed: int = 0) -> list[TokenizedExample]:
    generator = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, 256, (40,), generator=generator).tolist()
    return [
        _example(prefix, torch.randint(0, 256, (10 + 5 * i,), generator=generator).tolist(), group)
        for i in range(count)
    ]


def _rebuilt(rows, row: int) -> list[list[int]]:
    """Each conversation of a row, read back: a run from position 0, or a shared prefix plus a run."""
    ids, pos = rows.input_ids[row], rows.position_ids[row]
    segments = packed_segments(pos[None])
    out, start, root = [], 0, []
    for length, prefix in zip(segments.lengths, segments.prefixes, strict=True):
        run = ids[start : start + length].tolist()
        if prefix == 0:
            root = run
            out.append(run)
        else:
            out.append(root[:prefix] + run)
        start += length
    return out[: len(out) - (int(rows.row_tokens[row]) < ids.numel())]  # drop the padding run


def test_segments_read_shared_prefixes_off_the_positions() -> None:
    position_ids = torch.cat([torch.arange(17), torch.arange(10, 15), torch.arange(6)])[None]
    segments = packed_segments(position_ids)
    assert segments.lengths == [17, 5, 6]
    assert segments.prefixes == [0, 10, 0]
    assert segments.shares_prefixes
    assert not packed_segments(torch.arange(8)[None]).shares_prefixes


def test_shared_prefix_stops_before_a_trained_token_and_leaves_each_member_a_remainder() -> None:
    members = _members(group=0)
    assert shared_prefix_length(members) == 40
    # Two members that differ inside a reply they both start (trained from token 28): the remainders start
    # at the reply's first token, 27 + 1, which is then predicted only in the member laid out after the prefix.
    a = TokenizedExample(ids=[1] * 30 + [5, 6], loss_mask=[False] * 28 + [True, True, True, True], group=0)
    b = TokenizedExample(ids=[1] * 30 + [7], loss_mask=[False] * 28 + [True, True, True], group=0)
    assert shared_prefix_length([a, b]) == 27
    whole = TokenizedExample(ids=[1] * 30, loss_mask=[False] * 30, group=0)
    longer = TokenizedExample(ids=[1] * 35, loss_mask=[False] * 35, group=0)
    assert shared_prefix_length([whole, longer]) == 29


def test_groups_pack_their_prefix_once_and_every_conversation_reads_back_whole() -> None:
    grouped = [*_members(group=7), _example([9] * 5, [3] * 20, None)]
    rows = pack_examples(grouped, row_len=256, pad_id=0)
    assert rows.num_examples == 4 and rows.num_dropped == 0
    assert rows.num_shared_tokens == 2 * 40
    assert int(rows.row_tokens.sum()) == sum(len(m.ids) for m in grouped) - 80
    read_back = sorted(conv for r in range(rows.num_rows) for conv in _rebuilt(rows, r))
    assert read_back == sorted(m.ids for m in grouped)
    lone = pack_examples([TokenizedExample(m.ids, m.loss_mask) for m in grouped], row_len=256, pad_id=0)
    assert sorted(rows.labels[rows.labels != IGNORE_INDEX].tolist()) == sorted(
        lone.labels[lone.labels != IGNORE_INDEX].tolist()
    )


def test_a_group_too_long_for_a_row_is_split_and_a_short_prefix_is_not_shared() -> None:
    units = pack_units(_members(group=1, count=4), row_len=100)
    # Remainders of 10, 15, 20 and 25 tokens: 40 + 10 + 15 + 20 = 85 fits, the fourth starts another unit.
    assert [(len(u.members), u.prefix, u.length) for u in units] == [(3, 40, 85), (1, 0, 65)]
    few = [_example([4] * (MIN_SHARED_PREFIX - 1), [i, 1, 2, 3], group=2) for i in range(3)]
    assert [u.prefix for u in pack_units(few, row_len=100)] == [0, 0, 0]


def test_shared_prefix_rows_compute_what_each_conversation_computes_alone() -> None:
    torch.manual_seed(0)
    model = build_model(SHAPE, 256, 1, 0, seed=0).float()
    members = _members(group=0) + _members(group=1, count=2, seed=1) + [_example([3] * 6, [8] * 12, None)]
    rows = pack_examples(members, row_len=128, pad_id=0)
    assert rows.num_shared_tokens > 0
    model.set_attn_implementation(PACKED_SDPA)
    segments = packed_segments(rows.position_ids)
    with torch.no_grad():
        packed = model.model(input_ids=rows.input_ids, position_ids=rows.position_ids,
                             segment_lengths=segments.lengths, segment_prefixes=segments.prefixes)  # fmt: skip
    model.set_attn_implementation("sdpa")
    checked = 0
    for r in range(rows.num_rows):
        start = 0
        hidden = packed.last_hidden_state[r]
        row_segments = packed_segments(rows.position_ids[r : r + 1])
        for conversation, length, prefix in zip(_rebuilt(rows, r), row_segments.lengths, row_segments.prefixes,
                                                strict=False):  # fmt: skip
            with torch.no_grad():
                alone = model.model(input_ids=torch.tensor([conversation])).last_hidden_state[0]
            torch.testing.assert_close(hidden[start : start + length], alone[prefix:], atol=1e-5, rtol=1e-4)
            start += length
            checked += 1
    assert checked == len(members)


def test_grouped_and_lone_layouts_give_the_same_loss_and_gradients() -> None:
    members = _members(group=0) + _members(group=1, count=2, seed=1) + [_example([3] * 6, [8] * 12, None)]
    lone = [TokenizedExample(m.ids, m.loss_mask) for m in members]
    model = build_model(SHAPE, 256, 1, 0, seed=0).float()
    model.set_attn_implementation(PACKED_SDPA)
    results = []
    for examples in (members, lone):
        rows = pack_examples(examples, row_len=128, pad_id=0)
        model.zero_grad()
        loss = assistant_loss(model, rows.input_ids, rows.position_ids, rows.labels)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((loss.detach(), grads))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-4, atol=1e-6)


def test_with_a_context_loss_a_shared_prefix_is_one_text_trained_on_once() -> None:
    """The prompt targets of a group are its prefix's once and each remainder's after its first token."""
    members = _members(group=0)
    counts = []
    for examples in (members, [TokenizedExample(m.ids, m.loss_mask) for m in members]):
        rows = pack_examples(examples, row_len=128, pad_id=0)
        follows = rows.position_ids[:, 1:] == rows.position_ids[:, :-1] + 1
        real = torch.arange(1, 128)[None, :] < rows.row_tokens[:, None]
        counts.append(int((follows & real).sum()))
    assert (
        counts[0] == counts[1] - 2 * 40
    )  # two members no longer predict the 39 prefix targets and their first token


def test_a_shared_prefix_needs_its_root_in_the_same_row_and_the_packed_backend() -> None:
    model = build_model(SHAPE, 256, 1, 0, seed=0)
    model.set_attn_implementation(PACKED_SDPA)
    input_ids = torch.randint(0, 256, (2, 12))
    position_ids = torch.stack([torch.arange(12), torch.arange(4, 16)])  # row 1 continues row 0's prefix
    segments = packed_segments(position_ids)
    with pytest.raises(ValueError, match="prefix"):
        model.model(input_ids=input_ids, position_ids=position_ids, segment_lengths=segments.lengths,
                    segment_prefixes=segments.prefixes)  # fmt: skip
    rows = pack_examples(_members(group=0), row_len=128, pad_id=0)
    model.set_attn_implementation("sdpa")
    with pytest.raises(ValueError, match="packed attention"):
        assistant_loss(model, rows.input_ids, rows.position_ids, rows.labels)
    with pytest.raises(ValueError, match="packed_attention"):
        train_model(
            model, rows, TrainConfig(max_steps=1, batch_rows=1, packed_attention=False), progress=False
        )


def test_training_on_a_grouped_corpus(bundled_tokenizer: Tokenizer) -> None:
    examples = generate_corpus(CorpusConfig(seed=2, size=80, group_size=4))
    rows = pack_examples(tokenize_examples(bundled_tokenizer, examples), row_len=1024, pad_id=0)
    assert rows.num_shared_tokens > 0
    model = build_model(SHAPE, 1280, 2, 0, seed=0)
    result = train_model(model, rows, TrainConfig(max_steps=3, batch_rows=2, row_len=1024), progress=False)
    assert result.steps == 3 and all(loss == loss for loss in result.recent_losses)
