"""Attention over a paged KV cache.

The KV cache of one layer is a pair of tensors shaped [num_blocks, block_size, num_kv_heads, head_dim]. A
sequence owns a list of blocks (its block table); token i of the sequence lives in slot
`block_table[i // block_size] * block_size + i % block_size`. The engine describes each forward pass with an
`AttentionMetadata`; the model never sees sequences or the scheduler.

A step's tokens are laid out decode tokens first (one per decoding sequence), then speculative verification
chunks (a few tokens each, `VerifyBatch`), then the prefill chunks. Decodes are attended in one batched call, as
are verification chunks (padded to the longest); each prefill chunk in its own call, since chunks differ in
length. That is the SDPA path, which runs everywhere; when the metadata carries a kernel plan (the triton
backend, `models.attention_backend`), one Triton kernel attends the whole step in place instead.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from switchyard.models.kv_cache_dtype import as_stored, copyable, narrow
from switchyard.models.paged_kernel_plan import PagedKernelPlan, build_kernel_plan
from switchyard.models.streaming_attention import (
    Rotation,
    StreamingSpan,
    build_streaming_spans,
    streaming_attention,
)


@dataclass
class PrefillSpan:
    """One sequence's prefill chunk inside the flat token batch."""

    start: int
    """First index of the chunk in the step's flat token batch."""
    end: int
    """One past its last index."""
    context_len: int
    """Tokens of the sequence in the cache once this chunk is written (cached prefix + chunk)."""
    block_table: torch.Tensor
    """The blocks holding positions [0, context_len), as a 1-D long tensor on the model's device."""
    mask: torch.Tensor | None = None
    """Boolean [q_len, context_len] mask, None when plain causal attention over the chunk alone suffices."""

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass
class VerifyBatch:
    """Short chunks of several sequences (speculative verification: the last token and its drafts), attended
    together: each sequence's keys gathered once, its chunk's queries padded to the longest chunk, one call.
    Attending each chunk alone, as a prefill, costs one call per sequence and layer, which at batch 8 made a
    verification step about twice a plain one."""

    start: int
    end: int
    """The flat rows [start, end) of all the chunks, in order."""
    chunk_len: int
    """The longest chunk: queries are padded to it."""
    rows: torch.Tensor
    """[end - start] index of each flat row in the padded [sequences * chunk_len] grid."""
    block_tables: torch.Tensor
    """[sequences, max_blocks] block tables, padded with block 0."""
    mask: torch.Tensor
    """[sequences, 1, chunk_len, max_blocks * block_size]: the keys each (padded) query may attend to."""
    padded: bool
    """Whether some chunk is shorter than chunk_len (else the rows are the grid, in order)."""
    row_sequences: torch.Tensor | None = None
    """[end - start] the chunk (row of block_tables) of each flat row; with `row_context_lens`, on the CPU
    without a window only: the native decode step attends each row as a decode of that length."""
    row_context_lens: torch.Tensor | None = None
    """[end - start] the keys each flat row attends to, itself included (its position + 1)."""
    _grouped_masks: dict[int, torch.Tensor] = field(default_factory=dict)

    def grouped_mask(self, group: int) -> torch.Tensor:
        """The mask for queries laid out (query head in the KV group, chunk position), made once per step."""
        mask = self._grouped_masks.get(group)
        if mask is None:
            num_seqs, _, chunk, keys = self.mask.shape
            mask = self.mask.expand(num_seqs, group, chunk, keys).reshape(num_seqs, 1, group * chunk, keys)
            self._grouped_masks[group] = mask
        return mask


@dataclass
class AttentionMetadata:
    """What one forward pass needs to read and write the paged KV cache. Built once per step."""

    slot_mapping: torch.Tensor
    """[num_tokens] slot of each token of the batch, where its key and value are written."""
    block_size: int
    num_decode_tokens: int = 0
    decode_block_tables: torch.Tensor | None = None
    """[num_decodes, max_blocks] block tables of the decoding sequences, padded with block 0."""
    decode_mask: torch.Tensor | None = None
    """[num_decodes, 1, 1, max_blocks * block_size] which gathered slots each decode may attend to; None for a
    single decoding sequence without a sliding window, whose gathered keys are cut to decode_context_len."""
    decode_context_len: int = 0
    """The context length of a single decoding sequence (decode_mask None): no mask, no padding to mask."""
    decode_context_lens: torch.Tensor | None = None
    """[num_decodes] context lengths (int64, on the CPU) where the model runs on the CPU without a sliding
    window: what the native decode step (models/native_decode.py) reads instead of a mask."""
    prefills: list[PrefillSpan] = field(default_factory=list)
    verify: VerifyBatch | None = None
    kernel_plan: PagedKernelPlan | None = None
    """Set when the Triton kernel attends (`models.attention_backend`): then the SDPA fields above are empty."""
    sliding_window: int | None = None
    """The window the masks above apply (None: every query sees its whole prefix)."""
    streaming: list[StreamingSpan] | None = None
    """Attention sinks (`streaming_attention`): every query of the step, in spans, instead of the above."""
    rotation: Rotation | None = None
    """With `streaming`: the model's pure rotary rotation, to move the sinks' keys."""

    @classmethod
    def build(
        cls,
        *,
        slot_mapping: torch.Tensor,
        block_size: int,
        decode_block_tables: list[list[int]],
        decode_context_lens: list[int],
        prefill_spans: list[tuple[int, int, int, list[int]]],
        device: torch.device,
        sliding_window: int | None = None,
        verify_spans: list[tuple[int, int, int, list[int]]] | None = None,
        kernel_group: int | None = None,
        attention_sinks: int = 0,
        rotation: Rotation | None = None,
    ) -> AttentionMetadata:
        """Make the metadata from plain lists; all tensors and masks are derived here, once per step.

        prefill_spans holds (start, end, context_len, block_table) per prefill chunk; verify_spans the same for
        consecutive verification chunks, attended together. kernel_group (query heads per KV head) asks for the
        Triton kernel's plan instead of the SDPA masks. With `attention_sinks` (and a `sliding_window`), every
        query attends the StreamingLLM way instead (`streaming_attention`; `rotation` required).
        """
        if attention_sinks:
            if sliding_window is None or rotation is None:
                raise ValueError("attention sinks need a sliding window and the model's rotation")
            decodes = [
                (i, i + 1, n, table)
                for i, (n, table) in enumerate(zip(decode_context_lens, decode_block_tables, strict=True))
            ]
            every = decodes + list(verify_spans or ()) + prefill_spans
            return cls(
                slot_mapping=slot_mapping,
                block_size=block_size,
                num_decode_tokens=len(decodes),
                streaming=build_streaming_spans(every, block_size, attention_sinks, sliding_window, device),
                rotation=rotation,
            )
        num_decodes = len(decode_context_lens)
        if kernel_group is not None:
            chunks = (verify_spans or []) + prefill_spans
            plan = build_kernel_plan(
                q_lens=[1] * num_decodes + [end - start for start, end, _, _ in chunks],
                context_lens=list(decode_context_lens) + [context for _, _, context, _ in chunks],
                block_tables=list(decode_block_tables) + [table for _, _, _, table in chunks],
                block_size=block_size,
                group=kernel_group,
                device=device,
                sliding_window=sliding_window,
            )
            return cls(slot_mapping, block_size, num_decode_tokens=num_decodes, kernel_plan=plan)
        decode_tables = decode_mask = decode_lens = None
        single_len = 0
        if num_decodes and sliding_window is None and torch.device(device).type == "cpu":
            decode_lens = torch.tensor(decode_context_lens, dtype=torch.long)
        if num_decodes == 1 and sliding_window is None:
            # Batch 1, what a chat user feels: the block table as is, keys cut to the context, no mask to build
            # or apply (a masked attention kernel is the slower one).
            single_len = decode_context_lens[0]
            width = -(-single_len // block_size)
            decode_tables = torch.tensor([decode_block_tables[0][:width]], dtype=torch.long, device=device)
        elif num_decodes:
            lens_cpu = torch.tensor(decode_context_lens, dtype=torch.long)
            if sliding_window is None:
                width = -(-int(lens_cpu.max()) // block_size)
                # Tables may own a block beyond the context (allocated ahead); cut them to the width first.
                tables = [t if len(t) <= width else t[:width] for t in decode_block_tables]
                key_pos = torch.arange(width * block_size, device=device)[None, :]
            else:
                # Under a window, gather each sequence's blocks from the first one its query can see: the
                # work per decode stays bounded however long the sequence grows.
                firsts = [max(0, n - sliding_window) // block_size for n in decode_context_lens]
                ends = [-(-n // block_size) for n in decode_context_lens]
                width = max(end - first for first, end in zip(firsts, ends, strict=True))
                tables = [t[f:e] for t, f, e in zip(decode_block_tables, firsts, ends, strict=True)]
                offsets = torch.tensor(firsts, dtype=torch.long, device=device)[:, None] * block_size
                key_pos = offsets + torch.arange(width * block_size, device=device)[None, :]
            padded = np.zeros((num_decodes, width), dtype=np.int64)
            owned = np.arange(width)[None, :] < np.array([len(t) for t in tables])[:, None]
            padded[owned] = list(itertools.chain.from_iterable(tables))
            decode_tables = torch.from_numpy(padded).to(device)
            lens = lens_cpu.to(device)
            decode_mask = key_pos < lens[:, None]
            if sliding_window is not None:
                decode_mask &= key_pos >= (lens[:, None] - sliding_window)
            decode_mask = decode_mask[:, None, None, :]
        prefills = []
        for start, end, context_len, table in prefill_spans:
            q_len = end - start
            needed_blocks = -(-context_len // block_size)
            mask = None
            windowed = sliding_window is not None and context_len > sliding_window
            if context_len != q_len or windowed:
                q_pos = torch.arange(context_len - q_len, context_len, device=device)[:, None]
                k_pos = torch.arange(context_len, device=device)[None, :]
                mask = k_pos <= q_pos
                if sliding_window is not None:
                    mask &= k_pos > q_pos - sliding_window
            prefills.append(
                PrefillSpan(
                    start=start,
                    end=end,
                    context_len=context_len,
                    block_table=torch.tensor(table[:needed_blocks], dtype=torch.long, device=device),
                    mask=mask,
                )
            )
        return cls(
            slot_mapping=slot_mapping,
            block_size=block_size,
            num_decode_tokens=num_decodes,
            decode_block_tables=decode_tables,
            decode_mask=decode_mask,
            decode_context_len=single_len,
            decode_context_lens=decode_lens,
            prefills=prefills,
            verify=_verify_batch(verify_spans, block_size, device, sliding_window) if verify_spans else None,
            sliding_window=sliding_window,
        )


def metadata_per_layer(
    layer_windows: tuple[int | None, ...], sliding_window: int | None, **build: Any
) -> AttentionMetadata | list[AttentionMetadata]:
    """The step's metadata for a model whose layers may have different windows (`ModelArchConfig.layer_windows`,
    empty when they all use `sliding_window`): one build per distinct window, shared by its layers."""
    if not layer_windows:
        return AttentionMetadata.build(sliding_window=sliding_window, **build)
    by_window = {
        window: AttentionMetadata.build(sliding_window=window, **build) for window in set(layer_windows)
    }
    return [by_window[window] for window in layer_windows]


def write_kv(
    key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor
) -> None:
    """Store this step's keys and values ([tokens, kv_heads, head_dim]) in their slots, narrowed to the cache's
    dtype (`kv_cache_dtype`); mutates the caches."""
    num_kv_heads, head_dim = k_cache.shape[-2:]
    for fresh, cache in ((key, k_cache), (value, v_cache)):
        stored = narrow(fresh, cache.dtype)
        copyable(cache.view(-1, num_kv_heads, head_dim)).index_copy_(0, slots, copyable(stored))


def paged_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    metadata: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Attention for a flat batch of tokens: query [T, heads, head_dim] -> [T, heads, head_dim].

    Keys and values of this step must already be written to the cache (write_kv).
    """
    if metadata.kernel_plan is not None:
        # Imported here: Triton is an optional dependency, loaded only by engines that chose the kernel.
        from switchyard.models.triton_attention import triton_paged_attention

        return triton_paged_attention(query, k_cache, v_cache, metadata.kernel_plan, scale)
    if metadata.streaming is not None and metadata.rotation is not None:
        return streaming_attention(query, k_cache, v_cache, metadata.streaming, scale, metadata.rotation)
    num_decodes = metadata.num_decode_tokens
    if num_decodes == query.shape[0]:  # a pure decode step: no prefill chunks, no output assembly
        return _decode_attention(query, k_cache, v_cache, metadata, scale)
    out = torch.empty_like(query)
    if num_decodes:
        out[:num_decodes] = _decode_attention(query[:num_decodes], k_cache, v_cache, metadata, scale)
    if metadata.verify is not None:
        verify = metadata.verify
        out[verify.start : verify.end] = _verify_attention(
            query[verify.start : verify.end], k_cache, v_cache, verify, scale
        )
    for span in metadata.prefills:
        q = query[span.start : span.end].transpose(0, 1).unsqueeze(0)
        if span.mask is None:
            # Whole prompt in one chunk: attend to the fresh keys, no gather needed. Seen as the cache stores them,
            # so a narrow cache gives the same result however the prompt is chunked, batched or recomputed.
            k = as_stored(key[span.start : span.end], k_cache.dtype).transpose(0, 1).unsqueeze(0)
            v = as_stored(value[span.start : span.end], v_cache.dtype).transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
        else:
            k = k_cache.index_select(0, span.block_table).flatten(0, 1)[: span.context_len].to(query.dtype)
            v = v_cache.index_select(0, span.block_table).flatten(0, 1)[: span.context_len].to(query.dtype)
            o = F.scaled_dot_product_attention(
                q,
                k.transpose(0, 1).unsqueeze(0),
                v.transpose(0, 1).unsqueeze(0),
                attn_mask=span.mask,
                scale=scale,
                enable_gqa=True,
            )
        out[span.start : span.end] = o.squeeze(0).transpose(0, 1)
    return out


def _decode_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    metadata: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """One new token per sequence. The query heads sharing a KV head are laid out as that head's query rows,
    so grouped-query attention needs no copy of the keys per query head."""
    assert metadata.decode_block_tables is not None
    num_decodes, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[-2]
    group = num_heads // num_kv_heads
    k = _gather(k_cache, metadata.decode_block_tables, query.dtype)
    v = _gather(v_cache, metadata.decode_block_tables, query.dtype)
    q = query.view(num_decodes, num_kv_heads, group, head_dim)
    if metadata.decode_mask is None:  # one sequence: its keys up to its length, nothing to mask
        length = metadata.decode_context_len
        o = F.scaled_dot_product_attention(q, k[:, :, :length], v[:, :, :length], scale=scale)
    else:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=metadata.decode_mask, scale=scale)
    return o.reshape(num_decodes, num_heads, head_dim)


def _verify_batch(
    spans: list[tuple[int, int, int, list[int]]],
    block_size: int,
    device: torch.device,
    sliding_window: int | None,
) -> VerifyBatch:
    count = len(spans)
    chunk = max(end - start for start, end, _, _ in spans)
    context = [context_len for _, _, context_len, _ in spans]
    width = -(-max(context) // block_size)
    tables = np.zeros((count, width), dtype=np.int64)
    rows = []
    for index, (start, end, context_len, table) in enumerate(spans):
        needed = -(-context_len // block_size)
        tables[index, :needed] = table[:needed]
        rows.extend(range(index * chunk, index * chunk + end - start))
    lens = torch.tensor([end - start for start, end, _, _ in spans], device=device)
    contexts = torch.tensor(context, device=device)
    # Query j of a chunk of n tokens sits at position context - n + j; padded queries (j >= n) see key 0 only.
    q_pos = contexts[:, None] - lens[:, None] + torch.arange(chunk, device=device)[None, :]
    q_pos = torch.where(torch.arange(chunk, device=device)[None, :] < lens[:, None], q_pos, 0)
    k_pos = torch.arange(width * block_size, device=device)
    mask = k_pos[None, None, :] <= q_pos[:, :, None]
    if sliding_window is not None:
        mask &= k_pos[None, None, :] > q_pos[:, :, None] - sliding_window
    row_sequences = row_context_lens = None
    if sliding_window is None and torch.device(device).type == "cpu":
        row_sequences = torch.tensor(
            [index for index, (s, e, _, _) in enumerate(spans) for _ in range(e - s)]
        )
        row_context_lens = torch.tensor(
            [
                context_len - (end - row) + 1
                for start, end, context_len, _ in spans
                for row in range(start, end)
            ]
        )
    return VerifyBatch(
        start=spans[0][0],
        end=spans[-1][1],
        chunk_len=chunk,
        rows=torch.tensor(rows, dtype=torch.long, device=device),
        block_tables=torch.from_numpy(tables).to(device),
        mask=mask[:, None],
        padded=len(rows) != count * chunk,
        row_sequences=row_sequences,
        row_context_lens=row_context_lens,
    )


def _verify_attention(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, verify: VerifyBatch, scale: float
) -> torch.Tensor:
    """Queries of several short chunks [rows, heads, head_dim], each sequence's keys gathered once, one call.
    Query heads sharing a KV head are laid out as that head's query rows (heads x chunk positions), as decodes
    are, so no key is copied per query head."""
    num_seqs, chunk = verify.block_tables.shape[0], verify.chunk_len
    _, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[-2]
    group = num_heads // num_kv_heads
    if verify.padded:
        query = query.new_zeros(num_seqs * chunk, num_heads, head_dim).index_copy_(0, verify.rows, query)
    # [S, C, kv, G, hd] -> [S, kv, G * C, hd]
    q = query.view(num_seqs, chunk, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(num_seqs, num_kv_heads, group * chunk, head_dim)
    k = _gather(k_cache, verify.block_tables, query.dtype)
    v = _gather(v_cache, verify.block_tables, query.dtype)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=verify.grouped_mask(group), scale=scale)
    # [S, kv, G * C, hd] -> [S * C, heads, hd], then the real rows
    o = o.view(num_seqs, num_kv_heads, group, chunk, head_dim).permute(0, 3, 1, 2, 4)
    o = o.reshape(num_seqs * chunk, num_heads, head_dim)
    return o.index_select(0, verify.rows) if verify.padded else o


def _gather(cache: torch.Tensor, tables: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[sequences, max_blocks] block tables -> each sequence's keys (or values) [sequences, kv_heads, max_blocks *
    block_size, head_dim]. index_select, not advanced indexing: on CPU the latter is orders of magnitude slower
    for this gather. A cache narrower than the compute dtype is widened right after it (a no-op when they
    match)."""
    num_seqs = tables.shape[0]
    num_kv_heads, head_dim = cache.shape[-2:]
    gathered = cache.index_select(0, tables.view(-1))
    if gathered.dtype != dtype:  # checked in Python: a no-op cast still costs a dispatch, twice per layer
        gathered = gathered.to(dtype)
    return gathered.view(num_seqs, -1, num_kv_heads, head_dim).transpose(1, 2)
