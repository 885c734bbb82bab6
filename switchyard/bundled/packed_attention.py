"""Causal attention over packed training rows that skips the work between examples.

A training row packs several examples end to end, and transformers turns the restarting position ids into a
block-diagonal mask. SDPA's CPU kernel then scores every query against every key of the row and masks
afterwards: on the bundled corpus' 768-token rows (three to four examples each) the examples' own causal
triangles are under a third of that work, and attention was 40% of a main-model training step. This attention
runs one causal SDPA per example instead, over the same keys, so results match the masked form to float
rounding. The examples are cut from one tensor with `split`, whose backward is a single concatenation (slicing
them out one by one would give every slice a gradient the size of the whole batch). The CPU kernels are less
efficient on the short examples, so the step gains 1.07x, not the attention work's 3x.

The backend is registered with transformers under `PACKED_SDPA` (attention and a mask function that builds
nothing); a model switches to it with `model.set_attn_implementation(PACKED_SDPA)` and then needs
`segment_lengths=` in its forward call (`packed_segment_lengths`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

PACKED_SDPA = "switchyard_packed_sdpa"


def packed_segment_lengths(position_ids: torch.Tensor) -> list[int]:
    """Lengths of the examples in row-major order: a new one starts at every row start and wherever the
    position does not follow its predecessor (transformers' own rule for packed rows)."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    flat_starts = starts.flatten().nonzero().flatten()
    ends = torch.cat([flat_starts[1:], torch.tensor([position_ids.numel()])])
    return (ends - flat_starts).tolist()


def packed_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    segment_lengths: list[int] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention contract: (batch, heads, tokens, dim) in, (batch, tokens, heads, dim) out."""
    if segment_lengths is None:
        raise ValueError(f"{PACKED_SDPA} needs segment_lengths= in the forward call (packed_segment_lengths)")
    batch, heads, tokens, dim = query.shape
    if sum(segment_lengths) != batch * tokens:
        raise ValueError(
            f"segment lengths sum to {sum(segment_lengths)}, the batch holds {batch * tokens} tokens"
        )

    def flat(states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # (batch, h, tokens, dim) -> (1, h, batch * tokens, dim), split along tokens: one backward cat, not one
        # full-size gradient per slice.
        merged = states.transpose(0, 1).reshape(1, states.shape[1], batch * tokens, dim)
        return merged.split(segment_lengths, dim=2)

    outputs = [
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=k.shape[1] != q.shape[1]
        )
        for q, k, v in zip(flat(query), flat(key), flat(value), strict=True)
    ]
    merged = torch.cat(outputs, dim=2).reshape(heads, batch, tokens, dim)
    return merged.permute(1, 2, 0, 3), None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """The segments are the mask: nothing to build."""
    return None


AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
AttentionMaskInterface.register(PACKED_SDPA, _no_mask)
