"""Attention with sinks (StreamingLLM): each query sees the first `sinks` tokens and the last `window` ones.

Positions are those within the cache, as in the StreamingLLM paper: once the window has slid, a query sits
at cache position sinks + window - 1, the window's keys just before it and the sinks at 0..sinks-1, however
far the stream has run. Keys are stored once, rotated at their absolute position, and never re-rotated:
rotary attention depends only on the distance between query and key, and between a query and a window key
the cache distance equals the absolute one. Only the sinks are at a different distance (the cache closed the
gap the evicted tokens left), so each query rotates the sinks' keys forward by its own shift,
`max(0, p - (sinks + window - 1))`, before attending. Until the window first slides the shift is 0 and this
is plain causal attention, the model's own to rounding.

Key rotation per query keeps the cache layout the model's usual one (prefix caching, block release and
copy-on-write are unchanged); storing keys before rotation would have needed a second cache layout. Absolute
positions run past max_position_embeddings, which the rotary tables cover (`rope.RotaryEmbedding`), while no
query-key distance exceeds sinks + window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from switchyard.models.rope import apply_rotary

Rotation = Callable[[torch.Tensor, torch.dtype], tuple[torch.Tensor, torch.Tensor]]
"""(shifts, dtype) -> cos, sin [N, head_dim] of a pure rotation (`RotaryEmbedding.rotation`)."""


@dataclass
class StreamingSpan:
    """Consecutive queries of one sequence (a decode is a span of one) and the keys they may see."""

    start: int
    end: int
    """The flat rows [start, end) of the step's batch."""
    blocks: torch.Tensor
    """The sink blocks, then the window's blocks: [num_blocks] (a block may appear in both parts)."""
    num_sink_slots: int
    """Slots of the sink blocks at the head of `blocks` (a whole number of blocks)."""
    mask: torch.Tensor
    """[queries, slots]: which gathered slots each query attends to."""
    shifts: torch.Tensor
    """[queries] how far each query rotates the sinks' keys forward."""


def build_streaming_spans(
    spans: list[tuple[int, int, int, list[int]]],
    block_size: int,
    sinks: int,
    window: int,
    device: torch.device,
) -> list[StreamingSpan]:
    """(start, end, context_len, block_table) per chunk of queries (the last at position context_len - 1)."""
    sink_blocks = -(-sinks // block_size)
    made = []
    for start, end, context_len, table in spans:
        first_pos = context_len - (end - start)
        q_pos = torch.arange(first_pos, context_len, device=device)
        window_first = max(sinks, first_pos - window + 1) // block_size
        window_end = -(-context_len // block_size)
        blocks = table[:sink_blocks] + table[window_first:window_end]
        sink_pos = torch.arange(sink_blocks * block_size, device=device)
        win_pos = torch.arange(window_first * block_size, window_end * block_size, device=device)
        sink_mask = (sink_pos[None, :] < sinks) & (sink_pos[None, :] <= q_pos[:, None])
        win_mask = (win_pos[None, :] >= sinks) & (win_pos[None, :] > q_pos[:, None] - window)
        win_mask &= win_pos[None, :] <= q_pos[:, None]
        made.append(
            StreamingSpan(
                start=start,
                end=end,
                blocks=torch.tensor(blocks, dtype=torch.long, device=device),
                num_sink_slots=sink_blocks * block_size,
                mask=torch.cat([sink_mask, win_mask], dim=1),
                shifts=(q_pos - (sinks + window - 1)).clamp(min=0),
            )
        )
    return made


def streaming_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    spans: list[StreamingSpan],
    scale: float,
    rotation: Rotation,
) -> torch.Tensor:
    """query [T, heads, head_dim] -> [T, heads, head_dim]; this step's keys and values already written."""
    out = torch.empty_like(query)
    num_heads, head_dim = query.shape[1:]
    num_kv_heads = k_cache.shape[-2]
    group = num_heads // num_kv_heads
    for span in spans:
        keys = k_cache.index_select(0, span.blocks).flatten(0, 1).to(query.dtype)  # [slots, kv_heads, hd]
        values = v_cache.index_select(0, span.blocks).flatten(0, 1).to(query.dtype)
        q = query[span.start : span.end].view(-1, num_kv_heads, group, head_dim)
        cos, sin = rotation(span.shifts, query.dtype)
        # Each query's own copy of the sink keys, moved to its cache distance: [queries, sinks, kv, hd].
        sink_keys = apply_rotary(keys[None, : span.num_sink_slots], cos[:, None, None], sin[:, None, None])
        scores = torch.cat(
            [
                torch.einsum("qkgd,qskd->qkgs", q, sink_keys),
                torch.einsum("qkgd,skd->qkgs", q, keys[span.num_sink_slots :]),
            ],
            dim=-1,
        )
        scores = (scores * scale).float().masked_fill(~span.mask[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(query.dtype)
        attended = torch.einsum("qkgs,skd->qkgd", probs, values)
        out[span.start : span.end] = attended.reshape(-1, num_heads, head_dim)
    return out
