"""A bf16 linear layer whose decode rows go through the native bf16 dot-product kernel.

Decode multiplies a few rows by the whole weight, a read of every byte once: the native kernel (vdpbf16ps over
the plain row-major weight) streams it faster than oneDNN's pre-packed path at 1-8 rows
(benchmarks/decode_breakdown.py). Past that the layer runs `F.linear` on the same plain weight, which is 20-30%
slower than the packed layout at 16-64 rows: so `pack_linear_layers` uses this layer with one copy of the weight
only for latency-tuned engines, whose steps never carry more than a few rows. A small model (the bundled ones)
keeps a packed copy beside the plain weight (`packed=True`): larger products take oneDNN's packed layout, and the
decode step of a few rows stays native, at the price of its projections' memory twice.
"""

from __future__ import annotations

import torch
from torch import nn

from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.native_library import native_kernels

BF16_K_MULTIPLE = 32
"""The kernel consumes 32 inputs per instruction."""


def can_use_native_bf16(linear: nn.Linear) -> bool:
    """A bf16 CPU layer of whole 32-input steps, on a CPU where the native kernels load."""
    weight = linear.weight
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.bfloat16
        and linear.in_features % BF16_K_MULTIPLE == 0
        and native_kernels() is not None
    )


class NativeBf16Linear(nn.Module):
    """y = x W^T + b, bf16: the native kernel for up to `skinny_matmul.MAX_ROWS` rows, `F.linear` above."""

    def __init__(self, linear: nn.Linear, packed: bool = False) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.register_buffer("weight", linear.weight.detach().contiguous(), persistent=False)
        self.packed_weight: torch.Tensor | None = None
        """oneDNN's packed copy for products of more than `skinny_matmul.MAX_ROWS` rows (`packed=True`)."""
        if packed:
            with torch.no_grad():
                self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(self.weight, 1)
        bias = linear.bias.detach() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)
        self.register_buffer("bias_float", None if bias is None else bias.float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x if len(shape) == 2 else x.reshape(-1, shape[-1])
        if rows.dtype == torch.bfloat16 and rows.shape[0] <= skinny_matmul.MAX_ROWS:
            kernels = native_kernels()
            if kernels is not None:
                out = skinny_matmul.bf16_matmul(kernels, rows, self.weight, self.bias_float)
                return out if len(shape) == 2 else out.reshape(*shape[:-1], self.out_features)
        if self.packed_weight is not None and x.dtype == torch.bfloat16:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")
        return nn.functional.linear(x, self.weight, self.bias)

    @property
    def packed_copy_bytes(self) -> int:
        """The memory the packed copy adds (the size of the weight it copies)."""
        return 0 if self.packed_weight is None else self.weight.numel() * self.weight.element_size()

    def native_projection(self) -> skinny_matmul.NativeProjection:
        return skinny_matmul.NativeProjection(
            "bf16", self.out_features, self.in_features, self.weight, bias=self.bias_float
        )

    def extra_repr(self) -> str:
        packed = " and packed" if self.packed_weight is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bf16 native decode{packed}"
