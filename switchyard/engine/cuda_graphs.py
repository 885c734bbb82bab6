"""CUDA graphs for decode steps: the forward pass of a pure decode batch, captured once per padded batch size
and replayed from static input buffers.

At small batches a decode step is hundreds of short kernel launches whose CPU cost exceeds the GPU work; a
replayed graph issues them all at once. A graph replays fixed addresses and shapes, so a batch of n decodes is
padded to the smallest captured size >= n: its inputs are copied into static buffers whose padding rows
attend to nothing (query length 0 in the kernel plan) and write their keys to a scratch slot, one block past
the blocks the block manager hands out. Steps with prefills, speculative chunks or prompt logprobs, and
batches beyond the largest size, run eagerly.

Needs the Triton attention backend: its launch takes everything from device tensors, while the SDPA path
shapes its gathers from host values. The padding and buffer bookkeeping are device-independent and tested on
CPU; capture and replay run only on CUDA.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

from switchyard.models.attention import AttentionMetadata
from switchyard.models.llama import KVCaches, LlamaForCausalLM
from switchyard.models.paged_kernel_plan import DECODE_TILE_TOKENS, PagedKernelPlan

SMALL_SIZES = (1, 2, 4, 8)
SIZE_STEP = 16
MAX_CAPTURED = 256
"""Beyond this a decode step is long enough that launch overhead no longer matters."""


def decode_graph_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """Batch sizes to capture: 1, 2, 4, 8, then every multiple of 16, up to max_num_seqs (rounded up to a
    captured size) and at most 256. Padding wastes at most 15 rows of a batch above 16."""
    limit = min(max(1, max_num_seqs), MAX_CAPTURED)
    ladder = (*SMALL_SIZES, *range(SIZE_STEP, MAX_CAPTURED + 1, SIZE_STEP))
    return (*(size for size in ladder if size < limit), next(s for s in ladder if s >= limit))


def padded_batch_size(num_decodes: int, sizes: tuple[int, ...]) -> int | None:
    """The smallest captured size holding `num_decodes` rows (sizes ascending); None beyond the largest."""
    index = bisect.bisect_left(sizes, num_decodes)
    return sizes[index] if index < len(sizes) else None


@dataclass
class DecodeBuffers:
    """Static inputs of the captured graphs, sized for the largest batch; smaller graphs use leading slices."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    seg_q_start: torch.Tensor
    seg_q_len: torch.Tensor
    seg_context_len: torch.Tensor
    block_tables: torch.Tensor
    tile_q0: torch.Tensor
    scratch_slot: int

    @classmethod
    def allocate(
        cls, max_batch: int, max_blocks: int, scratch_slot: int, device: torch.device
    ) -> DecodeBuffers:
        def zeros(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        buffers = cls(
            input_ids=zeros(max_batch, dtype=torch.long),
            positions=zeros(max_batch, dtype=torch.long),
            slot_mapping=torch.full((max_batch,), scratch_slot, dtype=torch.long, device=device),
            # One row per segment: segment i starts at row i, and its tile is tile i.
            seg_q_start=torch.arange(max_batch, dtype=torch.int32, device=device),
            seg_q_len=zeros(max_batch),
            seg_context_len=zeros(max_batch),
            block_tables=zeros(max_batch, max_blocks),
            tile_q0=zeros(max_batch),
            scratch_slot=scratch_slot,
        )
        return buffers

    def metadata(self, size: int, block_size: int, sliding_window: int | None) -> AttentionMetadata:
        """The metadata a graph of `size` rows is captured with: views of the buffers, so a replay reads
        whatever `load` last wrote."""
        plan = PagedKernelPlan(
            seg_q_start=self.seg_q_start[:size],
            seg_q_len=self.seg_q_len[:size],
            seg_context_len=self.seg_context_len[:size],
            block_tables=self.block_tables[:size],
            tile_seg=self.seg_q_start[:size],
            tile_q0=self.tile_q0[:size],
            tile_tokens=DECODE_TILE_TOKENS,
            sliding_window=sliding_window,
        )
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:size],
            block_size=block_size,
            num_decode_tokens=size,
            kernel_plan=plan,
        )

    def load(
        self, size: int, input_ids: torch.Tensor, positions: torch.Tensor, metadata: AttentionMetadata
    ) -> None:
        """Copy one decode step (n <= size rows, planned for the kernel) into the first `size` rows; rows n..size
        become padding: token 0 at position 0, written to the scratch slot, attending to nothing."""
        plan = metadata.kernel_plan
        if plan is None or plan.tile_tokens != DECODE_TILE_TOKENS:
            raise ValueError("only a pure decode step planned for the Triton kernel can be replayed")
        n = input_ids.shape[0]
        if n > size:
            raise ValueError(f"{n} decodes do not fit a graph of {size}")
        width = plan.block_tables.shape[1]
        if width > self.block_tables.shape[1]:
            raise ValueError("a block table is longer than the captured width")
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slot_mapping[:n].copy_(metadata.slot_mapping)
        self.seg_q_len[:n].copy_(plan.seg_q_len)
        self.seg_context_len[:n].copy_(plan.seg_context_len)
        # Columns past `width` keep older entries: the kernel reads no block past a row's context.
        self.block_tables[:n, :width].copy_(plan.block_tables)
        self.input_ids[n:size].zero_()
        self.positions[n:size].zero_()
        self.slot_mapping[n:size].fill_(self.scratch_slot)
        self.seg_q_len[n:size].zero_()
        self.seg_context_len[n:size].zero_()


class DecodeGraphs:
    """The captured decode graphs of one model runner and their shared static buffers."""

    def __init__(
        self,
        sizes: tuple[int, ...],
        *,
        max_blocks: int,
        scratch_slot: int,
        block_size: int,
        sliding_window: int | None,
        device: torch.device,
    ) -> None:
        self.sizes = tuple(sorted(sizes))
        self.block_size = block_size
        self.sliding_window = sliding_window
        self.buffers = DecodeBuffers.allocate(self.sizes[-1], max_blocks, scratch_slot, device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.replays = 0
        """Decode steps served by a graph (for logs and tests)."""

    def capture(self, model: LlamaForCausalLM, kv_caches: KVCaches) -> None:
        """Capture every size, largest first so smaller graphs reuse its memory pool. Padding rows only: the
        capture writes to the scratch slot alone."""
        pool = None
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(stream):
            for size in reversed(self.sizes):
                metadata = self.buffers.metadata(size, self.block_size, self.sliding_window)
                ids, positions = self.buffers.input_ids[:size], self.buffers.positions[:size]
                model(ids, positions, kv_caches, metadata)  # warm-up: compiles kernels, settles allocations
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    self.outputs[size] = model(ids, positions, kv_caches, metadata)
                pool = graph.pool()
                self.graphs[size] = graph
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()

    def replay(
        self, input_ids: torch.Tensor, positions: torch.Tensor, metadata: AttentionMetadata
    ) -> torch.Tensor | None:
        """Hidden states [n, hidden] of a pure decode step through its padded graph, or None when the step is
        not one a graph covers (then it runs eagerly)."""
        n = input_ids.shape[0]
        plan = metadata.kernel_plan
        if n == 0 or metadata.num_decode_tokens != n or plan is None:
            return None
        size = padded_batch_size(n, self.sizes)
        if size is None or plan.block_tables.shape[1] > self.buffers.block_tables.shape[1]:
            return None
        self.buffers.load(size, input_ids, positions, metadata)
        self.graphs[size].replay()
        self.replays += 1
        return self.outputs[size][:n]
