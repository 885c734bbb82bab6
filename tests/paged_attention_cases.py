"""Random paged-attention steps, attended by the SDPA path (the reference) and by the Triton kernel: shared by
the CPU (interpreter) and CUDA kernel tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from switchyard.models.attention import AttentionMetadata, paged_attention, write_kv
from switchyard.models.paged_kernel_plan import PagedKernelPlan, build_kernel_plan


@dataclass
class PagedCase:
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    metadata: AttentionMetadata
    plan: PagedKernelPlan
    scale: float


def make_case(
    segments: list[tuple[int, int]],
    *,
    heads: int,
    kv_heads: int,
    head_dim: int = 16,
    block_size: int = 16,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    window: int | None = None,
    seed: int = 0,
) -> PagedCase:
    """One step of `segments` (q_len, context_len), decodes (q_len 1) first as the engine lays them out. Each
    sequence owns blocks drawn at random from a shuffled pool, so tables are out of order and interleaved; the
    cache holds random keys for the cached prefix and this step's keys are written by `write_kv`."""
    generator = torch.Generator().manual_seed(seed)
    segments = sorted(segments, key=lambda s: s[0] != 1)
    needed = [-(-context // block_size) for _, context in segments]
    num_blocks = sum(needed) + 3
    pool = torch.randperm(num_blocks, generator=generator).tolist()
    tables, taken = [], 0
    for count in needed:
        tables.append(pool[taken : taken + count])
        taken += count

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(dtype=dtype, device=device)

    k_cache = randn(num_blocks, block_size, kv_heads, head_dim)
    v_cache = randn(num_blocks, block_size, kv_heads, head_dim)
    slots, decode_tables, decode_lens, spans = [], [], [], []
    row = 0
    for (q_len, context), table in zip(segments, tables, strict=True):
        positions = range(context - q_len, context)
        slots += [table[p // block_size] * block_size + p % block_size for p in positions]
        if q_len == 1:
            decode_tables.append(table)
            decode_lens.append(context)
        else:
            spans.append((row, row + q_len, context, table))
        row += q_len
    num_decodes = len(decode_lens)
    query, key, value = (
        randn(row, heads, head_dim),
        randn(row, kv_heads, head_dim),
        randn(row, kv_heads, head_dim),
    )
    slot_mapping = torch.tensor(slots, dtype=torch.long, device=device)
    write_kv(key, value, k_cache, v_cache, slot_mapping)
    metadata = AttentionMetadata.build(
        slot_mapping=slot_mapping,
        block_size=block_size,
        decode_block_tables=decode_tables,
        decode_context_lens=decode_lens,
        prefill_spans=spans,
        device=torch.device(device),
        sliding_window=window,
    )
    assert metadata.num_decode_tokens == num_decodes
    plan = build_kernel_plan(
        q_lens=[q for q, _ in segments],
        context_lens=[c for _, c in segments],
        block_tables=tables,
        block_size=block_size,
        group=heads // kv_heads,
        device=torch.device(device),
        sliding_window=window,
    )
    return PagedCase(query, key, value, k_cache, v_cache, metadata, plan, head_dim**-0.5)


def reference(case: PagedCase) -> torch.Tensor:
    """The SDPA path's output, computed in float32 from the same (possibly bf16) inputs."""
    as32 = [t.float() for t in (case.query, case.key, case.value, case.k_cache, case.v_cache)]
    return paged_attention(*as32, case.metadata, case.scale)
