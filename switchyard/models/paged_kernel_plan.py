"""What the paged attention kernel (`models.triton_attention`) reads besides the cache: one step's sequences as
segments of the flat token batch, and the tiles of queries the kernel's programs take.

A step's tokens are decodes, verification chunks and prefill chunks, one after another; each is a segment of
`q_len` consecutive query rows whose last row sits at position `context_len - 1` of its sequence. The kernel
attends every segment in one launch per layer, reading keys and values through the block table in place
(no gather into a contiguous copy). A tile is up to `tile_tokens` query rows of one segment, times the query
heads sharing one KV head, so grouped-query attention loads each key once per tile. Tiles are listed here, on
the host, so the launch grid is exactly the work: no program spins on an empty slice of a short segment.

Pure bookkeeping: numpy and torch, no Triton, so it is tested on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

DECODE_TILE_TOKENS = 1
"""A decode segment is one query row: its tile is that row times the KV group."""
PREFILL_TILE_ROWS = 128
"""Rows (query tokens x query heads per KV head) a prefill tile aims at: large enough that each loaded key
block feeds a matrix multiply of useful size, small enough to stay in registers."""


def prefill_tile_tokens(group: int) -> int:
    """Query tokens per prefill tile for `group` query heads per KV head (at least 1)."""
    return max(1, PREFILL_TILE_ROWS // group)


@dataclass
class PagedKernelPlan:
    """Device tensors for one step's kernel launches; built once per step, shared by every layer."""

    seg_q_start: torch.Tensor
    """[segments] int32: first row of each segment in the flat batch."""
    seg_q_len: torch.Tensor
    """[segments] int32: its query rows (0 for padding rows of a captured CUDA graph: nothing attended)."""
    seg_context_len: torch.Tensor
    """[segments] int32: tokens of the sequence in the cache once this step's keys are written."""
    block_tables: torch.Tensor
    """[segments, max_blocks] int32 block tables, padded with block 0 (never read past context_len)."""
    tile_seg: torch.Tensor
    """[tiles] int32: the segment each tile belongs to."""
    tile_q0: torch.Tensor
    """[tiles] int32: the tile's first query row within its segment."""
    tile_tokens: int
    """Query rows per tile (the longest tile; decode-only steps use 1)."""
    sliding_window: int | None = None

    @property
    def num_tiles(self) -> int:
        return int(self.tile_seg.shape[0])


def plan_tiles(q_lens: np.ndarray, tile_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Split segments of `q_lens` query rows into tiles of at most `tile_tokens` rows: (segment, first row) per
    tile, in segment order. An empty segment still gets one tile (it writes nothing), so a padded decode batch
    keeps one tile per row and a fixed grid."""
    counts = np.maximum(1, -(-q_lens // tile_tokens))
    tile_seg = np.repeat(np.arange(len(q_lens)), counts)
    first_tile = np.cumsum(counts) - counts
    tile_q0 = (np.arange(int(counts.sum())) - np.repeat(first_tile, counts)) * tile_tokens
    return tile_seg.astype(np.int32), tile_q0.astype(np.int32)


def build_kernel_plan(
    *,
    q_lens: list[int],
    context_lens: list[int],
    block_tables: list[list[int]],
    block_size: int,
    group: int,
    device: torch.device,
    sliding_window: int | None = None,
) -> PagedKernelPlan:
    """The plan for segments laid out back to back from row 0 (decodes, verification chunks, prefills: the
    order `ModelRunner.prepare` builds). Tables are cut to the blocks their context needs."""
    if len(q_lens) != len(context_lens) or len(q_lens) != len(block_tables):
        raise ValueError("q_lens, context_lens and block_tables must describe the same segments")
    lens = np.asarray(q_lens, dtype=np.int64)
    contexts = np.asarray(context_lens, dtype=np.int64)
    if np.any(lens > contexts):
        raise ValueError("a segment has more query rows than context")
    starts = np.cumsum(lens) - lens
    needed = -(-contexts // block_size)
    width = max(1, int(needed.max(initial=0)))
    tables = np.zeros((len(lens), width), dtype=np.int32)
    for index, (table, count) in enumerate(zip(block_tables, needed, strict=True)):
        if len(table) < count:
            raise ValueError(
                f"segment {index}: {len(table)} blocks cannot hold a context of {contexts[index]}"
            )
        tables[index, :count] = table[:count]
    tile_tokens = DECODE_TILE_TOKENS if int(lens.max(initial=1)) <= 1 else prefill_tile_tokens(group)
    tile_seg, tile_q0 = plan_tiles(lens, tile_tokens)

    def put(array: np.ndarray) -> torch.Tensor:
        return to_device(torch.from_numpy(np.ascontiguousarray(array, dtype=np.int32)), device)

    return PagedKernelPlan(
        seg_q_start=put(starts),
        seg_q_len=put(lens),
        seg_context_len=put(contexts),
        block_tables=put(tables),
        tile_seg=put(tile_seg),
        tile_q0=put(tile_q0),
        tile_tokens=tile_tokens,
        sliding_window=sliding_window,
    )


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`; to a GPU through pinned memory without blocking the host, so building the
    next inputs overlaps the copy. On CPU the tensor itself."""
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)
