"""Causal attention over packed training rows that skips the work between examples.

A training row packs several examples end to end, and transformers turns the restarting position ids into a
block-diagonal mask. SDPA's CPU kernel then scores every query against every key of the row and masks
afterwards: on the bundled corpus' 768-token rows (three to four examples each) the examples' own causal
triangles are under a third of that work, and attention was 40% of a main-model training step. This attention
runs one causal SDPA per example instead, over the same keys, so results match the masked form to float
rounding. The examples are cut from one tensor with `split`, whose backward is a single concatenation (slicing
them out one by one would give every slice a gradient the size of the whole batch). The CPU kernels are less
efficient on the short examples, so the step gains 1.07x, not the attention work's 3x.

Rows may also hold *shared-prefix groups* (`data.pack_examples`): one copy of a prompt prefix followed by
several continuations, each positioned as if it came right after the prefix. A continuation attends to the
prefix's first `prefix` keys and then causally to itself, so it computes exactly what it would alone after the
prefix, while the prefix is computed once for the whole group (`segment_prefixes`, read off the positions by
`packed_segments`).

The backend is registered with transformers under `PACKED_SDPA` (attention and a mask function that builds
nothing); a model switches to it with `model.set_attn_implementation(PACKED_SDPA)` and then needs
`segment_lengths=` (and for shared prefixes `segment_prefixes=`) in its forward call (`packed_segments`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

PACKED_SDPA = "switchyard_packed_sdpa"


@dataclass(frozen=True)
class PackedSegments:
    """Runs of consecutive positions in a batch of packed rows, row-major."""

    lengths: list[int]
    prefixes: list[int]
    """Per run, the position it starts at: 0 for a run that starts a sequence, p > 0 for a continuation of
    the last sequence-starting run of its row, which it reads the first p keys of."""

    @property
    def shares_prefixes(self) -> bool:
        return any(self.prefixes)


def packed_segments(position_ids: torch.Tensor) -> PackedSegments:
    """Runs start at every row start and wherever the position does not follow its predecessor (transformers'
    own rule for packed rows); a run that starts at position p > 0 continues the row's last run that started
    at 0 after its first p tokens."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    flat_starts = starts.flatten().nonzero().flatten()
    ends = torch.cat([flat_starts[1:], torch.tensor([position_ids.numel()])])
    return PackedSegments(
        lengths=(ends - flat_starts).tolist(), prefixes=position_ids.flatten()[flat_starts].tolist()
    )


def packed_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    segment_lengths: list[int] | None = None,
    segment_prefixes: list[int] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention contract: (batch, heads, tokens, dim) in, (batch, tokens, heads, dim) out.

    Without `segment_prefixes` every run is its own causal sequence."""
    if segment_lengths is None:
        raise ValueError(f"{PACKED_SDPA} needs segment_lengths= in the forward call (packed_segments)")
    batch, heads, tokens, dim = query.shape
    if sum(segment_lengths) != batch * tokens:
        raise ValueError(
            f"segment lengths sum to {sum(segment_lengths)}, the batch holds {batch * tokens} tokens"
        )
    prefixes = segment_prefixes if segment_prefixes is not None else [0] * len(segment_lengths)
    if len(prefixes) != len(segment_lengths):
        raise ValueError(f"{len(prefixes)} segment prefixes for {len(segment_lengths)} segments")

    # Under autocast SDPA runs in the autocast dtype; RoPE leaves queries and keys in float32, and a cast per
    # example (and back, in the backward) cost 3-5% of a main-model step. Cast whole rows once instead.
    device = query.device.type
    cast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None

    def flat(states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # (batch, h, tokens, dim) -> (1, h, batch * tokens, dim), split along tokens: one backward cat, not one
        # full-size gradient per slice.
        if cast is not None:
            states = states.to(cast)
        merged = states.transpose(0, 1).reshape(1, states.shape[1], batch * tokens, dim)
        return merged.split(segment_lengths, dim=2)

    gqa = key.shape[1] != heads
    outputs = []
    root: tuple[torch.Tensor, torch.Tensor, int] | None = None
    row_start = 0
    starts = itertools.accumulate(segment_lengths[:-1], initial=0)
    for q, k, v, prefix, start in zip(flat(query), flat(key), flat(value), prefixes, starts, strict=True):
        if start // tokens != row_start // tokens:
            root, row_start = None, start  # a shared prefix never reaches into the next row
        if prefix == 0:
            root = (k, v, q.shape[2])
            outputs.append(_sdpa(q, k, v, None, dropout, scaling, gqa))
            continue
        if root is None or prefix > root[2]:
            raise ValueError(
                f"a segment continues a {prefix}-token prefix that its row does not hold before it"
            )
        length = q.shape[2]
        mask = torch.ones(length, prefix + length, dtype=torch.bool, device=q.device)
        mask[:, prefix:] = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        keys = torch.cat([root[0][:, :, :prefix], k], dim=2)
        values = torch.cat([root[1][:, :, :prefix], v], dim=2)
        outputs.append(_sdpa(q, keys, values, mask, dropout, scaling, gqa))
    merged = torch.cat(outputs, dim=2).reshape(heads, batch, tokens, dim)
    return merged.permute(1, 2, 0, 3), None


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float,
    scaling: float | None,
    gqa: bool,
) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=mask is None, scale=scaling, enable_gqa=gqa
    )


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """The segments are the mask: nothing to build."""
    return None


AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
AttentionMaskInterface.register(PACKED_SDPA, _no_mask)
