"""Rotary position embeddings: inverse frequencies for the supported scaling types, and their application."""

from __future__ import annotations

import math

import torch

from switchyard.models.config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int, max_position_embeddings: int) -> torch.Tensor:
    """Inverse frequencies in float32, following the definitions of each rope type in transformers."""
    inv_freq = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if rope.rope_type == "linear":
        return inv_freq / rope.factor
    if rope.rope_type == "llama3":
        original = rope.original_max_position_embeddings or max_position_embeddings
        low_freq_wavelen = original / rope.low_freq_factor
        high_freq_wavelen = original / rope.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
        smooth = (original / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
        is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, scaled)
    return inv_freq


class RotaryEmbedding(torch.nn.Module):
    """Cos/sin tables for every position up to max_positions, computed once in float32.

    The sin table is stored sign-folded (its first half negated) so that rotation is one flip and one fused
    multiply-add (`apply_rotary`), three operators instead of seven: at batch 1 a decode step is short enough
    that per-operator overhead, 24 layers times each operator, is a visible share of it.
    """

    def __init__(self, rope: RopeConfig, head_dim: int, max_positions: int, max_position_embeddings: int):
        super().__init__()
        inv_freq = inverse_frequencies(rope, head_dim, max_position_embeddings)
        positions = torch.arange(max_positions, dtype=torch.float32)
        freqs = torch.outer(positions, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_table", emb.cos(), persistent=False)
        self.register_buffer("sin_table", torch.cat((-freqs.sin(), freqs.sin()), dim=-1), persistent=False)
        self._cast: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """[T, 1, head_dim] cos and sign-folded sin tables for the given positions, in the activation dtype.

        The tables are cast to the activation dtype once (on first use), not once per step.
        """
        tables = self._cast.get(dtype)
        if tables is None or tables[0].device != self.cos_table.device:
            tables = (self.cos_table.to(dtype).unsqueeze(1), self.sin_table.to(dtype).unsqueeze(1))
            self._cast[dtype] = tables
        return tables[0].index_select(0, positions), tables[1].index_select(0, positions)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [T, heads, head_dim] by the half-split convention Llama checkpoints use.

    With x = (x1, x2) by halves, the result is (x1 cos - x2 sin, x2 cos + x1 sin): the halves swapped
    (one flip of a [.., 2, half] view) times the sign-folded sin (`RotaryEmbedding.cos_sin`), added to x cos.
    """
    half = x.shape[-1] // 2
    swapped = x.unflatten(-1, (2, half)).flip(-2).flatten(-2)
    return torch.addcmul(x * cos, swapped, sin)
