"""CUDA graph bookkeeping that needs no GPU: captured sizes, padding choice, static buffers, and the padded
decode batch a graph replays computing what the unpadded batch does (run eagerly here, in Triton's
interpreter; capture and replay themselves are covered by the gpu-marked engine tests)."""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import pytest
import torch

from switchyard.engine.cuda_graphs import DecodeBuffers, decode_graph_sizes, padded_batch_size
from switchyard.engine.model_runner import ModelRunner
from switchyard.models.attention import AttentionMetadata
from switchyard.models.attention_backend import triton_available
from switchyard.models.loader import load_model

CPU = torch.device("cpu")


def test_sizes_climb_in_powers_of_two_then_sixteens_and_cover_max_num_seqs() -> None:
    assert decode_graph_sizes(1) == (1,)
    assert decode_graph_sizes(5) == (1, 2, 4, 8)
    assert decode_graph_sizes(20) == (1, 2, 4, 8, 16, 32)
    big = decode_graph_sizes(1000)
    assert big[:6] == (1, 2, 4, 8, 16, 32) and big[-1] == 256
    assert all(b - a == 16 for a, b in itertools.pairwise(big[4:]))


@pytest.mark.parametrize(("n", "size"), [(1, 1), (3, 4), (8, 8), (9, 16), (17, 32), (256, 256), (257, None)])
def test_a_batch_takes_the_smallest_graph_that_holds_it(n: int, size: int | None) -> None:
    assert padded_batch_size(n, decode_graph_sizes(256)) == size


def _decode_metadata(contexts: list[int], tables: list[list[int]], block_size: int) -> AttentionMetadata:
    slots = [
        t[(c - 1) // block_size] * block_size + (c - 1) % block_size
        for c, t in zip(contexts, tables, strict=True)
    ]
    return AttentionMetadata.build(
        slot_mapping=torch.tensor(slots),
        block_size=block_size,
        decode_block_tables=tables,
        decode_context_lens=contexts,
        prefill_spans=[],
        device=CPU,
        kernel_group=2,
    )


def test_load_pads_rows_to_the_scratch_slot_and_empty_segments() -> None:
    buffers = DecodeBuffers.allocate(8, max_blocks=4, scratch_slot=99, device=CPU)
    buffers.block_tables.fill_(7)  # stale entries from an earlier, wider step
    metadata = _decode_metadata([5, 9, 2], [[3, 1], [0, 2, 6], [4]], block_size=4)
    buffers.load(4, torch.tensor([11, 12, 13]), torch.tensor([4, 8, 1]), metadata)
    assert buffers.input_ids[:4].tolist() == [11, 12, 13, 0]
    assert buffers.positions[:4].tolist() == [4, 8, 1, 0]
    assert buffers.slot_mapping[:4].tolist() == [4, 24, 17, 99]
    assert buffers.seg_q_len[:4].tolist() == [1, 1, 1, 0]
    assert buffers.seg_context_len[:4].tolist() == [5, 9, 2, 0]
    assert buffers.block_tables[:3, :3].tolist() == [[3, 1, 0], [0, 2, 6], [4, 0, 0]]
    assert buffers.seg_q_start[:4].tolist() == [0, 1, 2, 3]
    # Rows past the graph's size are not the step's business.
    assert buffers.slot_mapping[4:].tolist() == [99] * 4
    with pytest.raises(ValueError, match="do not fit"):
        buffers.load(2, torch.tensor([1, 2, 3]), torch.tensor([4, 8, 1]), metadata)
    with pytest.raises(ValueError, match="longer than the captured width"):
        wide = _decode_metadata([21], [[0, 1, 2, 3, 5, 6]], block_size=4)
        buffers.load(1, torch.tensor([1]), torch.tensor([20]), wide)


@pytest.mark.skipif(
    not triton_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton in interpreter mode (conftest turns it on without CUDA)",
)
def test_a_padded_batch_computes_what_the_batch_alone_does(tiny_model_dir: Path) -> None:
    """Three decodes padded to a graph of 4: same hidden states as the eager step, and the padding row's keys
    land in the scratch block only."""
    torch.manual_seed(0)
    model = load_model(tiny_model_dir)
    block_size, num_blocks = 4, 24
    runner = ModelRunner(
        model,
        num_blocks,
        block_size,
        torch.float32,
        CPU,
        attention_backend="triton",
        decode_graph_sizes=(1, 4),
    )
    assert runner.kv_cache.shape[2] == num_blocks + 1  # the scratch block
    runner.kv_cache[:, :, :num_blocks].normal_()
    contexts = [5, 11, 2]
    pool = random.Random(0).sample(range(num_blocks), 8)
    tables = [pool[0:2], pool[2:5], pool[5:6]]
    metadata = _decode_metadata(contexts, tables, block_size)
    ids, positions = torch.tensor([17, 42, 99]), torch.tensor([c - 1 for c in contexts])
    before = runner.kv_cache.clone()
    eager = model(ids, positions, runner.kv_caches, metadata)
    after_eager = runner.kv_cache.clone()

    runner.kv_cache.copy_(before)
    buffers = DecodeBuffers.allocate(4, max_blocks=8, scratch_slot=num_blocks * block_size, device=CPU)
    buffers.load(4, ids, positions, metadata)
    padded = model(
        buffers.input_ids[:4], buffers.positions[:4], runner.kv_caches, buffers.metadata(4, 4, None)
    )
    torch.testing.assert_close(padded[:3], eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(runner.kv_cache[:, :, :num_blocks], after_eager[:, :, :num_blocks])
    # The padding row wrote there, and only there. What it wrote is not compared: its attention attends to no
    # key, so its output row (and the next layer's keys from it) is whatever the kernel's buffer held, NaN at
    # times; a NaN-blind sum made this assertion flaky.
    assert (runner.kv_cache[:, :, num_blocks] != 0).any()


def test_graphs_need_the_kernel(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="triton attention backend"):
        ModelRunner(load_model(tiny_model_dir), 4, 4, torch.float32, CPU, decode_graph_sizes=(1,))
