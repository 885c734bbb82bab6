"""The paged kernel's step layout: segments back to back, tiles exactly covering them, bad layouts refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from switchyard.models.paged_kernel_plan import build_kernel_plan, plan_tiles, prefill_tile_tokens

CPU = torch.device("cpu")


def test_tiles_cover_every_row_once_and_empty_segments_get_one() -> None:
    tile_seg, tile_q0 = plan_tiles(np.array([1, 0, 130, 64]), tile_tokens=64)
    assert tile_seg.tolist() == [0, 1, 2, 2, 2, 3]
    assert tile_q0.tolist() == [0, 0, 0, 64, 128, 0]


def test_plan_lays_segments_back_to_back_and_cuts_tables() -> None:
    plan = build_kernel_plan(
        q_lens=[1, 1, 40],
        context_lens=[5, 17, 40],
        block_tables=[[9, 3, 7], [2, 4, 6, 8, 10], [1, 0, 5]],
        block_size=16,
        group=4,
        device=CPU,
        sliding_window=8,
    )
    assert plan.seg_q_start.tolist() == [0, 1, 2]
    assert plan.seg_context_len.tolist() == [5, 17, 40]
    # Blocks past a segment's context are cut (decode tables may own one ahead), padded with block 0.
    assert plan.block_tables.tolist() == [[9, 0, 0], [2, 4, 0], [1, 0, 5]]
    assert plan.tile_tokens == prefill_tile_tokens(4) == 32
    assert plan.tile_seg.tolist() == [0, 1, 2, 2] and plan.tile_q0.tolist() == [0, 0, 0, 32]
    assert plan.sliding_window == 8 and plan.seg_q_len.dtype == torch.int32


def test_a_decode_only_step_has_one_row_tiles() -> None:
    plan = build_kernel_plan(
        q_lens=[1, 1], context_lens=[3, 9], block_tables=[[0], [1, 2, 3]], block_size=4, group=8, device=CPU
    )
    assert plan.tile_tokens == 1 and plan.num_tiles == 2


def test_bad_layouts_are_refused() -> None:
    with pytest.raises(ValueError, match="same segments"):
        build_kernel_plan(
            q_lens=[1], context_lens=[3, 4], block_tables=[[0]], block_size=4, group=1, device=CPU
        )
    with pytest.raises(ValueError, match="more query rows than context"):
        build_kernel_plan(q_lens=[5], context_lens=[3], block_tables=[[0]], block_size=4, group=1, device=CPU)
    with pytest.raises(ValueError, match="cannot hold a context of 9"):
        build_kernel_plan(
            q_lens=[1], context_lens=[9], block_tables=[[0, 1]], block_size=4, group=1, device=CPU
        )
