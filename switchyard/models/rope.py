"""Rotary position embeddings: inverse frequencies for the supported scaling types, and their application.

Dynamic NTK scaling stretches the rotary base once the sequence outgrows `max_position_embeddings`, by an
amount that depends on the sequence length. transformers recomputes it from the longest position in each
forward call, so in its own incremental decoding the token at position p is rotated with the base for length
p + 1, and keys already cached keep the rotation they were written with. That is the rule here, as a fixed
table per position: a token's rotation never depends on how the engine batched or chunked it, so prefix
caching, chunked prefill and speculative verification see the same keys. (A one-shot transformers forward
over a prompt longer than the trained context instead rotates every token by the final length; no KV cache,
transformers' own included, can reproduce that without recomputing all keys at each step.)
"""

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
    if rope.rope_type == "yarn":
        return _yarn_inverse_frequencies(rope, head_dim, max_position_embeddings)
    return inv_freq


def _yarn_inverse_frequencies(rope: RopeConfig, head_dim: int, max_position_embeddings: int) -> torch.Tensor:
    """YaRN: dimensions that turn more than beta_fast times over the original context keep their frequency,
    those turning fewer than beta_slow times are divided by the factor, and a linear ramp blends between."""
    original = rope.original_max_position_embeddings or max_position_embeddings

    def correction_dim(rotations: float) -> float:
        return head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # the reference implementation's guard against a zero-width ramp
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation_weight = 1 - ramp
    pos_freqs = rope.theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    interpolated, extrapolated = 1.0 / (rope.factor * pos_freqs), 1.0 / pos_freqs
    return interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight


def dynamic_ntk_angles(rope: RopeConfig, head_dim: int, max_positions: int, trained: int) -> torch.Tensor:
    """[max_positions, head_dim / 2] rotation angles under dynamic NTK: position p uses the base stretched for a
    sequence of max(p + 1, trained) tokens (see the module docstring)."""
    positions = torch.arange(max_positions, dtype=torch.float32)
    lengths = torch.clamp(torch.arange(1, max_positions + 1, dtype=torch.float32), min=trained)
    bases = rope.theta * ((rope.factor * lengths / trained) - (rope.factor - 1)) ** (
        head_dim / (head_dim - 2)
    )
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    # Rows within the trained context are the plain default frequencies, computed exactly as those are.
    inv_freq = 1.0 / (bases[:, None] ** exponents[None, :])
    inv_freq[: min(trained, max_positions)] = 1.0 / (rope.theta**exponents)
    return positions[:, None] * inv_freq


class RotaryEmbedding(torch.nn.Module):
    """Cos/sin tables for every position up to max_positions, computed once in float32.

    The sin table is stored sign-folded (its first half negated) so that rotation is one flip and one fused
    multiply-add (`apply_rotary`), three operators instead of seven: at batch 1 a decode step is short enough
    that per-operator overhead, 24 layers times each operator, is a visible share of it.
    """

    def __init__(self, rope: RopeConfig, head_dim: int, max_positions: int, max_position_embeddings: int):
        super().__init__()
        if rope.rope_type == "dynamic":
            emb = _halves(dynamic_ntk_angles(rope, head_dim, max_positions, max_position_embeddings))
            cos, sin = emb.cos(), emb.sin()
        else:
            inv_freq = inverse_frequencies(rope, head_dim, max_position_embeddings)
            emb = _halves(torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq))
            cos, sin = emb.cos(), emb.sin()
            if max_positions > max_position_embeddings:
                # Past the trained context (attention sinks and windows reach it) no reference fixes the
                # rounding, and a float32 angle near position 1e5 is off by ~0.01 rad: those rows are computed
                # in float64, so relative angles stay exact however far a stream runs.
                beyond = torch.arange(max_position_embeddings, max_positions, dtype=torch.float64)
                far = _halves(torch.outer(beyond, inv_freq.double()))
                cos[max_position_embeddings:], sin[max_position_embeddings:] = far.cos(), far.sin()
        self.attention_factor = rope.attention_factor
        # YaRN scales cos and sin (its attention temperature); a factor of 1.0 leaves the tables bit-exact.
        self.register_buffer("cos_table", cos * rope.attention_factor, persistent=False)
        half = head_dim // 2
        sign_folded = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        self.register_buffer("sin_table", sign_folded * rope.attention_factor, persistent=False)
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

    def rotation(self, shifts: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """[N, head_dim] cos and (sign-folded, as `apply_rotary` takes it) sin of a pure rotation by `shifts`
        positions (no YaRN factor): applied to a key already rotated at position s, it gives the key rotated at
        s + shift."""
        cos = self.cos_table.index_select(0, shifts) / self.attention_factor
        sin = self.sin_table.index_select(0, shifts) / self.attention_factor
        return cos.to(dtype), sin.to(dtype)


def _halves(freqs: torch.Tensor) -> torch.Tensor:
    return torch.cat((freqs, freqs), dim=-1)


def sign_folded(sin: torch.Tensor) -> torch.Tensor:
    """A plain sin table (as transformers gives it) in the form `apply_rotary` takes: its first half negated."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [T, heads, head_dim] by the half-split convention Llama checkpoints use.

    With x = (x1, x2) by halves, the result is (x1 cos - x2 sin, x2 cos + x1 sin): the halves swapped
    (one flip of a [.., 2, half] view) times the sign-folded sin (`RotaryEmbedding.cos_sin`), added to x cos.
    """
    half = x.shape[-1] // 2
    swapped = x.unflatten(-1, (2, half)).flip(-2).flatten(-2)
    return torch.addcmul(x * cos, swapped, sin)
