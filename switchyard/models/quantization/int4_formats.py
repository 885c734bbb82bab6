"""Unpacking the int4 (and GPTQ int8) layouts of pre-quantized checkpoints into one form: unsigned codes
[out, in], and per group a scale and a zero point in code units, so that weight = (code - zero) * scale.

- GPTQ: `qweight` int32 [in / 8, out] packs 8 consecutive input rows per word, the first in the lowest bits;
  `qzeros` int32 [groups, out / 8] packs 8 consecutive output columns; `scales` [groups, out]; `g_idx` [in] the
  group of each input channel (with `desc_act` not monotonic). Classic GPTQ packs each zero point minus 1.
- AWQ GEMM: `qweight` int32 [in, out / 8] and `qzeros` [groups, out / 8] pack 8 output columns per word in the
  order 0, 2, 4, 6, 1, 3, 5, 7 (bits 0-3 hold column 0, bits 4-7 column 2, ...); `scales` [groups, out].
- compressed-tensors pack-quantized: `weight_packed` int32 [out, in / 8] packs 8 consecutive inputs, codes
  stored as signed value + 8; `weight_zero_point` (asymmetric) packed the same way along the output rows;
  `weight_scale` [out, groups]; `weight_shape` the unpacked shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from switchyard.models.quantization.schemes import CheckpointScheme

AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""AWQ's output column held by each 4-bit field of a word, lowest bits first."""

CHECKPOINT_GRID = "checkpoint_int4_grid"
"""The attribute of a loaded nn.Linear holding the Int4Grid its weight was stored on (pre-quantized int4)."""
CHECKPOINT_EXPERT_GRIDS = "checkpoint_int4_expert_grids"
"""The attribute of a loaded mixture block: {stacked expert parameter's name: one Int4Grid per expert}."""

Reader = Callable[[str], torch.Tensor]


@dataclass(frozen=True)
class Int4Grid:
    """The quantization grid of one projection: weight = (code - zeros) * scales, per `group_size` inputs."""

    scales: torch.Tensor
    """float32 [out, groups]."""
    zeros: torch.Tensor
    """float32 [out, groups], in code units."""
    group_size: int

    def expanded(self, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(scales, zeros) repeated for a finer `group_size` (a per-channel grid for the kernel's groups)."""
        if self.group_size % group_size:
            raise ValueError(f"a grid of group {self.group_size} cannot be split into groups of {group_size}")
        repeat = self.group_size // group_size
        return self.scales.repeat_interleave(repeat, dim=1), self.zeros.repeat_interleave(repeat, dim=1)

    def rows(self, index: torch.Tensor) -> Int4Grid:
        """The grid of output rows `index` (a column-parallel shard: each row keeps its own groups)."""
        index = index.to(self.scales.device)
        return Int4Grid(
            self.scales.index_select(0, index), self.zeros.index_select(0, index), self.group_size
        )

    def columns(self, start: int, width: int) -> Int4Grid:
        """The grid of input columns [start, start + width) (a row-parallel shard). The slice must hold whole
        groups (any slice of a per-channel grid does); ValueError otherwise."""
        group = self.group_size
        if self.scales.shape[1] == 1:  # per channel: every column shares its row's scale and zero
            return Int4Grid(self.scales, self.zeros, width)
        if start % group or width % group:
            raise ValueError(f"columns [{start}, {start + width}) do not fall on groups of {group}")
        first, end = start // group, (start + width) // group
        return Int4Grid(self.scales[:, first:end], self.zeros[:, first:end], group)

    def codes(self, weight: torch.Tensor) -> torch.Tensor:
        """The codes of `weight` (dequantized from this grid, possibly rounded to bf16: |code - zero| <= 16,
        so bf16's relative error 2^-9 moves a code by < 0.04 and rounding recovers it exactly)."""
        out_features, in_features = weight.shape
        if self.scales.shape[0] != out_features or self.scales.shape[1] * self.group_size < in_features:
            raise ValueError(
                f"an int4 grid of {tuple(self.scales.shape)} groups of {self.group_size} does not cover a weight "
                f"of {tuple(weight.shape)}"
            )
        scales = self.scales.to(weight.device).repeat_interleave(self.group_size, dim=1)[:, :in_features]
        zeros = self.zeros.to(weight.device).repeat_interleave(self.group_size, dim=1)[:, :in_features]
        return torch.round(weight.float() / scales + zeros).clamp(0, 15).to(torch.int32)


@dataclass(frozen=True)
class DecodedWeight:
    """A projection's weight as floats, and its grid when the int4 kernel can use it as stored."""

    weight: torch.Tensor
    grid: Int4Grid | None


def is_packed(scheme: CheckpointScheme, base: str, has: Callable[[str], bool]) -> bool:
    """Whether the checkpoint stores projection `base` (a name without `.weight`) packed in `scheme`'s layout."""
    suffix = "weight_packed" if scheme.kind == "packed-int4" else "qweight"
    return has(f"{base}.{suffix}")


def decode(scheme: CheckpointScheme, base: str, read: Reader) -> DecodedWeight:
    """Projection `base`'s weight from its packed tensors (read by name)."""
    if scheme.kind == "gptq":
        return _gptq(scheme, base, read)
    if scheme.kind == "awq":
        return _awq(base, read)
    return _compressed_tensors(scheme, base, read)


def unpack_int32(
    packed: torch.Tensor, bits: int, dim: int, order: Sequence[int] | None = None
) -> torch.Tensor:
    """Codes packed `32 // bits` to an int32 word along `dim` (0 or 1), the first in the lowest bits unless
    `order` names the position each field holds. Returns int32 codes, `32 // bits` times longer along `dim`."""
    per_word = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=packed.device)
    fields = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & ((1 << bits) - 1)  # [rows, cols, per_word]
    if order is not None:
        fields = fields[..., _inverse(order)]
    if dim == 1:
        return fields.reshape(packed.shape[0], packed.shape[1] * per_word)
    return fields.permute(0, 2, 1).reshape(packed.shape[0] * per_word, packed.shape[1])


def _inverse(order: Sequence[int]) -> list[int]:
    inverse = [0] * len(order)
    for field, position in enumerate(order):
        inverse[position] = field
    return inverse


def _gptq(scheme: CheckpointScheme, base: str, read: Reader) -> DecodedWeight:
    bits = scheme.bits
    codes = unpack_int32(read(f"{base}.qweight"), bits, dim=0).t()  # [out, in]
    zeros = unpack_int32(read(f"{base}.qzeros"), bits, dim=1).t().float()  # [out, groups]
    if scheme.zeros_stored_minus_one:
        zeros = zeros + 1
    scales = read(f"{base}.scales").float().t()
    in_features = codes.shape[1]
    group = scheme.group_size or in_features
    contiguous = torch.arange(in_features) // group
    try:
        g_idx = read(f"{base}.g_idx").long()
    except KeyError:
        g_idx = contiguous
    weight = (codes.float() - zeros[:, g_idx]) * scales[:, g_idx]
    # act-order (desc_act) checkpoints whose g_idx is not the contiguous one cannot be expressed by the grouped
    # kernel without permuting every activation: they are kept dequantized in the model's dtype
    contiguous_groups = torch.equal(g_idx, contiguous)
    grid = Int4Grid(scales, zeros, group) if bits == 4 and contiguous_groups else None
    return DecodedWeight(weight, grid)


def _awq(base: str, read: Reader) -> DecodedWeight:
    codes = unpack_int32(read(f"{base}.qweight"), 4, dim=1, order=AWQ_PACK_ORDER).t()  # [out, in]
    zeros = unpack_int32(read(f"{base}.qzeros"), 4, dim=1, order=AWQ_PACK_ORDER).t().float()
    scales = read(f"{base}.scales").float().t()
    group = codes.shape[1] // scales.shape[1]
    return DecodedWeight(_dequantize(codes, scales, zeros, group), Int4Grid(scales, zeros, group))


def _compressed_tensors(scheme: CheckpointScheme, base: str, read: Reader) -> DecodedWeight:
    out_features, in_features = (int(size) for size in read(f"{base}.weight_shape").tolist())
    codes = unpack_int32(read(f"{base}.weight_packed"), 4, dim=1)[:, :in_features]
    scales = read(f"{base}.weight_scale").float()
    if scheme.symmetric:
        zeros = torch.full_like(scales, 8.0)  # signed codes are stored as value + 8: zero sits at 8
    else:
        zeros = unpack_int32(read(f"{base}.weight_zero_point"), 4, dim=0)[:out_features].float()
    group = scheme.group_size or in_features
    return DecodedWeight(_dequantize(codes, scales, zeros, group), Int4Grid(scales, zeros, group))


def _dequantize(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group: int) -> torch.Tensor:
    in_features = codes.shape[1]
    scale = scales.repeat_interleave(group, dim=1)[:, :in_features]
    zero = zeros.repeat_interleave(group, dim=1)[:, :in_features]
    return (codes.float() - zero) * scale
