"""int4 weights, group-wise asymmetric (a scale and a zero point per `group_size` inputs of each output row).

A quarter of bf16's bytes: the decode products read a quarter of the memory. On CPU torch's
`_weight_int4pack_mm_for_cpu` takes the packed weight and a [groups, out, 2] scale-and-zero table; the value
of a 4-bit code q in a group is (q - 8) * scale + zero. On CPUs with AVX-512 VNNI the layer instead holds the
native kernels' layout (cpu_kernels): decode's few rows go through integer dot products at over twice torch's
rate, and larger products through a dequantized bf16 weight, several times faster than torch's int4 kernel there.
"""

from __future__ import annotations

import torch
from torch import nn

from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.native_library import native_kernels
from switchyard.models.quantization.int4_formats import Int4Grid


def quantize_int4_groups(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes 0..15 as int32 [out, in], float32 scale-and-zero [in / group, out, 2])."""
    out_features, in_features = weight.shape
    groups = weight.detach().float().reshape(out_features, in_features // group_size, group_size)
    low = groups.amin(dim=-1, keepdim=True)
    high = groups.amax(dim=-1, keepdim=True)
    scales = (high - low).clamp(min=1e-8) / 15.0
    codes = (
        torch.round((groups - low) / scales).clamp(0, 15).to(torch.int32).reshape(out_features, in_features)
    )
    zeros = low + scales * 8.0
    table = torch.stack([scales.squeeze(-1), zeros.squeeze(-1)], dim=-1).transpose(0, 1).contiguous()
    return codes, table


def grid_int4_groups(
    weight: torch.Tensor, grid: Int4Grid, group_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A pre-quantized checkpoint's own codes and grid, as `quantize_int4_groups` returns them: the value
    (q - zero) * scale is (q - 8) * scale + (8 - zero) * scale."""
    scales, zeros = grid.expanded(group_size)
    table = torch.stack([scales, (8.0 - zeros) * scales], dim=-1).transpose(0, 1).contiguous()
    return grid.codes(weight), table.to(weight.device)


def dequantize_int4_groups(codes: torch.Tensor, table: torch.Tensor, group_size: int) -> torch.Tensor:
    out_features, in_features = codes.shape
    scales = table[..., 0].t().unsqueeze(-1)
    zeros = table[..., 1].t().unsqueeze(-1)
    groups = codes.float().reshape(out_features, in_features // group_size, group_size)
    return ((groups - 8.0) * scales + zeros).reshape(out_features, in_features)


class Int4Linear(nn.Module):
    """y = x W^T + b with W int4 per group: quantized here from `linear`, or the codes of `grid` (a pre-quantized
    checkpoint's, which are kept exactly: never rounded a second time)."""

    def __init__(self, linear: nn.Linear, group_size: int = 128, grid: Int4Grid | None = None) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        if self.in_features % group_size:
            raise ValueError(
                f"int4: in_features {self.in_features} is not a multiple of group_size {group_size}"
            )
        self.group_size = group_size
        self.dtype = linear.weight.dtype
        if grid is None:
            codes, table = quantize_int4_groups(linear.weight, group_size)
        else:
            codes, table = grid_int4_groups(linear.weight.detach(), grid, group_size)
        self.on_cpu = linear.weight.device.type == "cpu"
        self.native = (
            self.on_cpu
            and self.in_features % skinny_matmul.BLOCK == 0
            and group_size % skinny_matmul.BLOCK == 0
            and native_kernels() is not None
        )
        bias = linear.bias.detach() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)
        if self.native:
            packed, scale, offset = skinny_matmul.pack_int4(codes, table, group_size)
            self.register_buffer("packed_weight", packed, persistent=False)
            self.register_buffer("group_scale", scale, persistent=False)
            self.register_buffer("group_offset", offset, persistent=False)
            self.register_buffer("bias_float", None if bias is None else bias.float(), persistent=False)
            return
        if self.on_cpu:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        else:  # two codes per byte, dequantized per product (no int4 kernel for this device in torch)
            packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
        self.register_buffer("packed_weight", packed, persistent=False)
        self.register_buffer("scales_and_zeros", table.to(self.dtype), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x if len(shape) == 2 else x.reshape(-1, shape[-1])
        if self.native:
            out = self._native(rows)  # bias included
            return out if len(shape) == 2 else out.reshape(*shape[:-1], self.out_features)
        if self.on_cpu:
            table = self.scales_and_zeros
            if table.dtype != rows.dtype:  # checked in Python: a no-op cast still costs a dispatch per call
                table = table.to(rows.dtype)
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed_weight, self.group_size, table)
        else:
            low = (self.packed_weight & 0xF).to(torch.int32)
            high = (self.packed_weight >> 4).to(torch.int32)
            codes = torch.stack([low, high], dim=-1).reshape(self.out_features, self.in_features)
            weight = dequantize_int4_groups(codes, self.scales_and_zeros.float(), self.group_size)
            out = nn.functional.linear(rows, weight.to(rows.dtype))
        if self.bias is not None:
            out = out + self.bias
        return out if len(shape) == 2 else out.reshape(*shape[:-1], self.out_features)

    def native_projection(self) -> skinny_matmul.NativeProjection | None:
        """The weight for calls from C (the fused decode step), None where the native kernels are off."""
        if not self.native:
            return None
        return skinny_matmul.NativeProjection(
            "int4",
            self.out_features,
            self.in_features,
            self.packed_weight,
            aux1=self.group_scale,
            aux2=self.group_offset,
            bias=self.bias_float,
            group=self.group_size,
        )

    def _native(self, rows: torch.Tensor) -> torch.Tensor:
        kernels = native_kernels()
        assert kernels is not None  # self.native was set from it
        if skinny_matmul.fits(rows):
            out = skinny_matmul.int4_matmul(
                kernels,
                rows,
                self.packed_weight,
                self.group_scale,
                self.group_offset,
                self.group_size,
                self.bias_float,
            )
            return out
        dense = torch.bfloat16 if rows.dtype == torch.bfloat16 else torch.float32
        weight = skinny_matmul.int4_dequantize(
            kernels, self.packed_weight, self.group_scale, self.group_offset, self.group_size, dense
        )
        bias = None if self.bias is None else self.bias.to(rows.dtype)
        return nn.functional.linear(rows, weight.to(rows.dtype), bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int4 group {self.group_size}"
        )
