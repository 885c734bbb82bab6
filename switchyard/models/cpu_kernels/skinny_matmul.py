"""Torch-facing wrappers of the native kernels: activation rows in, a new tensor out, no state.

Each takes rows [M, K] in bf16 or float32 (contiguous), K a multiple of BLOCK, and returns [M, N] in the rows'
dtype. The layers call these only for up to MAX_ROWS rows (decode); larger products stay on PyTorch's
compute-bound kernels. Weights arrive in the layouts `int8_block_sums` and `pack_int4` prepare at load time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from switchyard.models.cpu_kernels.native_library import NativeKernels

BLOCK = 128
"""Inputs per activation-quantization block (and the int4 packing unit)."""

MAX_ROWS = 8
"""Up to this many rows the products are memory-bound and the native kernels win (benchmarks/decode_breakdown.py);
past it PyTorch's batched kernels take over."""

NATIVE_DTYPES = (torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class NativeProjection:
    """A layer's weight as the native kernels take it, for calls made from C (decode_layers.c's fused step):
    `kind` "bf16" (weight [N, K]), "int8" (weight, aux1 the block sums, aux2 the row scales) or "int4" (the
    `pack_int4` layout: weight, aux1 the group scales, aux2 the group offsets, `group` inputs per group);
    `bias` float32 or None."""

    kind: str
    out_features: int
    in_features: int
    weight: torch.Tensor
    aux1: torch.Tensor | None = None
    aux2: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    group: int = 0


def fits(rows: torch.Tensor) -> bool:
    """Whether these rows take a native product: on CPU, few, a supported dtype (the layers built for the native
    path have already checked that their inputs come in whole blocks)."""
    return rows.device.type == "cpu" and rows.shape[0] <= MAX_ROWS and rows.dtype in NATIVE_DTYPES


def _pointer(tensor: torch.Tensor | None) -> int | None:
    return tensor.data_ptr() if tensor is not None else None


def _native_product(function: Any, rows: torch.Tensor, n: int, weights: tuple[Any, ...]) -> torch.Tensor:
    """Calls a native `sy_linear_*(x, x_bf16, M, K, *weights, N, y, y_bf16)` into a new [M, N] tensor."""
    rows = rows.contiguous()
    m, k = rows.shape
    out = torch.empty(m, n, dtype=rows.dtype)
    bf16 = rows.dtype == torch.bfloat16
    if not function(rows.data_ptr(), bf16, m, k, *weights, n, out.data_ptr(), bf16):
        raise MemoryError("native product: no memory for the quantized activations")
    return out


def int8_block_sums(weight: torch.Tensor) -> torch.Tensor:
    """Per output row and input block, the sum of the int8 weights (the activation offset's correction)."""
    n, k = weight.shape
    return weight.reshape(n, k // BLOCK, BLOCK).sum(dim=-1, dtype=torch.int32).contiguous()


def int8_matmul(
    kernels: NativeKernels,
    rows: torch.Tensor,
    weight: torch.Tensor,
    block_sums: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """rows @ (weight * scale[:, None]).T + bias, weight int8 [N, K], scale and bias float32 [N]."""
    weights = (weight.data_ptr(), block_sums.data_ptr(), scale.data_ptr(), _pointer(bias))
    return _native_product(kernels.library.sy_linear_int8, rows, weight.shape[0], weights)


def int8_dequantize(
    kernels: NativeKernels, weight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """weight * scale[:, None] as a dense [N, K] tensor of `dtype` (bf16 or float32); scale float32 [N]."""
    n, k = weight.shape
    out = torch.empty(n, k, dtype=dtype)
    kernels.library.sy_dequantize_int8(
        weight.data_ptr(), scale.data_ptr(), n, k, out.data_ptr(), dtype == torch.bfloat16
    )
    return out


def pack_int4(
    codes: torch.Tensor, table: torch.Tensor, group_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed uint8 [N, K / 2], scale float32 [N, groups], offset float32 [N, groups]) from codes 0..15 [N, K]
    and the [groups, N, 2] scale-and-zero table whose value is (q - 8) * scale + zero, i.e. q * scale + offset.

    Per row and block of 128 inputs, 64 bytes: byte j holds code j in its low nibble and code 64 + j in its high.
    """
    n, k = codes.shape
    blocks = codes.to(torch.uint8).reshape(n, k // BLOCK, 2, BLOCK // 2)
    packed = (blocks[:, :, 0, :] | (blocks[:, :, 1, :] << 4)).reshape(n, k // 2).contiguous()
    scale = table[..., 0].float().t().contiguous()
    offset = (table[..., 1].float() - 8.0 * table[..., 0].float()).t().contiguous()
    return packed, scale, offset


def int4_matmul(
    kernels: NativeKernels,
    rows: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """rows @ W.T + bias for the `pack_int4` layout."""
    weights = (packed.data_ptr(), scale.data_ptr(), offset.data_ptr(), group_size, _pointer(bias))
    return _native_product(kernels.library.sy_linear_int4, rows, packed.shape[0], weights)


def int4_dequantize(
    kernels: NativeKernels,
    packed: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    group_size: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The `pack_int4` weight as a dense [N, K] tensor of `dtype` (bf16 or float32)."""
    n = packed.shape[0]
    k = packed.shape[1] * 2
    out = torch.empty(n, k, dtype=dtype)
    kernels.library.sy_dequantize_int4(
        packed.data_ptr(),
        scale.data_ptr(),
        offset.data_ptr(),
        n,
        k,
        group_size,
        out.data_ptr(),
        dtype == torch.bfloat16,
    )
    return out


def bf16_matmul(
    kernels: NativeKernels, rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """rows @ weight.T + bias, rows and weight bf16 (weight [N, K] row-major), bias float32 or None."""
    rows = rows.contiguous()
    m, k = rows.shape
    n = weight.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16)
    kernels.library.sy_gemv_bf16(
        rows.data_ptr(), m, k, weight.data_ptr(), _pointer(bias), n, out.data_ptr(), True
    )
    return out


def rms_norm(kernels: NativeKernels, rows: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """rows / sqrt(mean(rows^2) + eps) * weight over the last dimension, rows [M, H] contiguous, bf16 or f32."""
    m, h = rows.shape
    out = torch.empty_like(rows)
    kernels.library.sy_rms_norm(
        rows.data_ptr(),
        rows.dtype == torch.bfloat16,
        m,
        h,
        weight.data_ptr(),
        weight.dtype == torch.bfloat16,
        eps,
        out.data_ptr(),
    )
    return out
