"""A mixture's routed experts, quantized: each expert's gate/up and down as its own int8, w8a8 or int4 layer.

The routed experts hold most of a mixture's weights (Mixtral's 8, Qwen3-MoE's 128 per layer), and a decode step
over a batch reads many of them, so they are what quantization must shrink; `switchyard plan --quantization`
counts them quantized. Each expert becomes the same layer a dense projection does (`int8_linear`,
`int4_linear`): decode's few rows per expert go through the native kernels, prefill's through `_int_mm` or a
dequantized weight, and a pre-quantized checkpoint's per-expert int4 grid is kept exactly. `SparseMoeBlock`
calls `QuantizedExperts` in place of its stacked [experts, out, in] weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from switchyard.models.quantization.int4_formats import Int4Grid

LayerFactory = Callable[[nn.Linear, Int4Grid | None], nn.Module]
"""Builds one expert's quantized layer from its float weight (as an nn.Linear) and its checkpoint grid."""


class QuantizedExperts(nn.Module):
    """Routed experts as quantized layers: `forward(rows, ends)` runs the rows sorted by expert, expert `e`
    taking rows [ends[e - 1], ends[e]), and returns their down projections (unweighted, as the stacked path)."""

    def __init__(self, gate_up: Sequence[nn.Module], down: Sequence[nn.Module]) -> None:
        super().__init__()
        if len(gate_up) != len(down):
            raise ValueError(f"{len(gate_up)} gate/up layers for {len(down)} down layers")
        self.gate_up = nn.ModuleList(gate_up)
        self.down = nn.ModuleList(down)

    @classmethod
    def build(
        cls,
        gate_up: torch.Tensor,
        down: torch.Tensor,
        make: LayerFactory,
        grids: tuple[Sequence[Int4Grid], Sequence[Int4Grid]] | None = None,
    ) -> QuantizedExperts:
        """From stacked weights (gate_up [experts, 2 * inner, hidden], down [experts, hidden, inner]) and,
        for a pre-quantized checkpoint, each expert's gate/up and down grids."""
        experts = gate_up.shape[0]
        gate_up_grids: Sequence[Int4Grid | None] = grids[0] if grids is not None else [None] * experts
        down_grids: Sequence[Int4Grid | None] = grids[1] if grids is not None else [None] * experts
        return cls(
            [make(_as_linear(gate_up[e]), gate_up_grids[e]) for e in range(experts)],
            [make(_as_linear(down[e]), down_grids[e]) for e in range(experts)],
        )

    def forward(self, rows: torch.Tensor, ends: Sequence[int]) -> torch.Tensor:
        out = torch.empty_like(rows)
        start = 0
        for expert, end in enumerate(ends):
            if end > start:
                gate, up = self.gate_up[expert](rows[start:end]).chunk(2, dim=-1)
                out[start:end] = self.down[expert](F.silu(gate) * up)
            start = end
        return out

    def extra_repr(self) -> str:
        return f"experts={len(self.gate_up)}, layer={type(self.gate_up[0]).__name__}"


def _as_linear(weight: torch.Tensor) -> nn.Linear:
    """An expert's [out, in] slice as the nn.Linear the quantized layers are built from (no copy)."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta", dtype=weight.dtype)
    linear.weight = nn.Parameter(weight, requires_grad=False)
    return linear
