"""int8 weights with one scale per output channel; optionally int8 activations with one scale per token (w8a8).

Decode multiplies a few rows of activations by the whole weight: memory-bound, so int8 weights (half of bf16's
bytes) are read by `_weight_int8pack_mm`, which dequantizes in registers. Prefill multiplies many rows: compute-
bound, so w8a8 quantizes the activations per token and runs `torch._int_mm` (int8 x int8 -> int32, twice the
bf16 rate on VNNI cores) when a step has at least `INT_MM_MIN_ROWS` rows, and the weight-only path below that.
On CPUs with AVX-512 VNNI, the few rows of decode go to the native kernel (cpu_kernels), which quantizes them per
block of 128 and streams the int8 weight through integer dot products at about twice `_weight_int8pack_mm`'s rate.
"""

from __future__ import annotations

import torch
from torch import nn

from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.native_library import native_kernels

INT_MM_MIN_ROWS = 32
"""Below this many rows a product is memory-bound: quantizing activations would only add work."""


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weight, float32 scale per output row): symmetric, the largest |w| of a row maps to 127."""
    w = weight.detach().float()
    scales = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 activations, float32 scale per row) for a 2-D activation matrix."""
    xf = x.float()
    scales = xf.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
    return torch.round(xf / scales).clamp(-127, 127).to(torch.int8), scales


class Int8Linear(nn.Module):
    """y = x W^T + b with W int8 per-channel; `dynamic_activations` makes it w8a8 for large products."""

    def __init__(self, linear: nn.Linear, dynamic_activations: bool = False) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.dynamic_activations = dynamic_activations
        weight, scales = quantize_per_channel(linear.weight)
        dtype = linear.weight.dtype
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("weight_scale", scales, persistent=False)
        self.register_buffer("weight_scale_in_dtype", scales.to(dtype), persistent=False)
        bias = linear.bias.detach() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)
        self.native = (
            weight.device.type == "cpu"
            and self.in_features % skinny_matmul.BLOCK == 0
            and native_kernels() is not None
        )
        if self.native:
            self.register_buffer("block_sums", skinny_matmul.int8_block_sums(weight), persistent=False)
            self.register_buffer("bias_float", None if bias is None else bias.float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x if len(shape) == 2 else x.reshape(-1, shape[-1])
        if self.native and rows.device.type == "cpu" and rows.dtype in skinny_matmul.NATIVE_DTYPES:
            out = self._native(rows)
            if out is not None:
                return out if len(shape) == 2 else out.reshape(*shape[:-1], self.out_features)
        if self.dynamic_activations and rows.shape[0] >= INT_MM_MIN_ROWS and _int_mm_supported(rows):
            out = self._int8_activations(rows)
        elif rows.device.type == "cpu":
            scale = self.weight_scale_in_dtype
            if scale.dtype != rows.dtype:  # checked in Python: a no-op cast still costs a dispatch per call
                scale = scale.to(rows.dtype)
            out = torch.ops.aten._weight_int8pack_mm(rows, self.weight, scale)
        else:  # no int8-weight kernel in torch for this device: dequantize (correct; memory as bf16 while running)
            out = nn.functional.linear(rows, self.weight.to(rows.dtype)) * self.weight_scale_in_dtype.to(
                rows.dtype
            )
        if self.bias is not None:
            out = out + self.bias
        return out if len(shape) == 2 else out.reshape(*shape[:-1], self.out_features)

    def _native(self, rows: torch.Tensor) -> torch.Tensor | None:
        """Decode rows through the native kernel; prefill rows (weight-only) through a dequantized weight; None
        where w8a8's `_int_mm` is the faster path."""
        kernels = native_kernels()
        assert kernels is not None  # self.native was set from it
        if skinny_matmul.fits(rows):
            return skinny_matmul.int8_matmul(
                kernels, rows, self.weight, self.block_sums, self.weight_scale, self.bias_float
            )
        if self.dynamic_activations and rows.shape[0] >= INT_MM_MIN_ROWS:
            return None
        weight = skinny_matmul.int8_dequantize(kernels, self.weight, self.weight_scale, rows.dtype)
        return nn.functional.linear(rows, weight, self.bias)

    def native_projection(self) -> skinny_matmul.NativeProjection | None:
        """The weight for calls from C (the fused decode step), None where the native kernels are off."""
        if not self.native:
            return None
        return skinny_matmul.NativeProjection(
            "int8",
            self.out_features,
            self.in_features,
            self.weight,
            aux1=self.block_sums,
            aux2=self.weight_scale,
            bias=self.bias_float,
        )

    def _int8_activations(self, rows: torch.Tensor) -> torch.Tensor:
        q, scales = quantize_per_token(rows)
        accumulated = torch._int_mm(q, self.weight.t())
        return (accumulated.float() * scales * self.weight_scale).to(rows.dtype)

    def extra_repr(self) -> str:
        kind = "w8a8" if self.dynamic_activations else "int8 weight-only"
        return f"in_features={self.in_features}, out_features={self.out_features}, {kind}"


def _int_mm_supported(rows: torch.Tensor) -> bool:
    # CUDA's int8 GEMM wants rows > 16 and both matrix dimensions multiples of 8
    return rows.device.type == "cpu" or (rows.shape[0] > 16 and rows.shape[1] % 8 == 0)
