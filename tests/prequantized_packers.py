"""Pre-quantized Hugging Face checkpoints for tests: GPTQ and AWQ projections packed here from the formats'
documentation, compressed-tensors int4 and fp8 packed by the `compressed-tensors` package itself, and a
folder writer that packs a plain folder's projections."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")
"""Projection names a checkpoint packs (Mixtral's experts are w1 gate, w2 down, w3 up)."""
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)

Packer = Callable[[torch.Tensor], tuple[dict[str, torch.Tensor], torch.Tensor]]
"""A float weight [out, in] -> (the checkpoint tensors of the projection by suffix, the dequantized weight)."""


def _grid(weight: torch.Tensor, group: int, bits: int, symmetric: bool, g_idx: torch.Tensor):
    """Integer codes [out, in] and per-group scales and zero points [out, groups] (weight = (q - z) * s)."""
    levels = (1 << bits) - 1
    groups = int(g_idx.max()) + 1
    scales = torch.empty(weight.shape[0], groups)
    zeros = torch.empty(weight.shape[0], groups)
    for g in range(groups):
        cols = weight[:, g_idx == g]
        if symmetric:
            scales[:, g] = cols.abs().amax(dim=1).clamp(min=1e-8) * 2 / levels
            zeros[:, g] = (levels + 1) // 2
        else:
            low, high = cols.amin(dim=1).clamp(max=0), cols.amax(dim=1).clamp(min=0)
            scales[:, g] = (high - low).clamp(min=1e-8) / levels
            zeros[:, g] = torch.round(-low / scales[:, g])
    scales = scales.half().float()  # stored as fp16
    codes = torch.round(weight / scales[:, g_idx] + zeros[:, g_idx]).clamp(0, levels).to(torch.int64)
    return codes, scales, zeros.to(torch.int64)


def _to_int32(words: torch.Tensor) -> torch.Tensor:
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _pack_along_rows(values: torch.Tensor, bits: int) -> torch.Tensor:
    """[rows, cols] -> int32 [rows * bits / 32, cols]: consecutive rows in one word, the first lowest."""
    per = 32 // bits
    chunks = values.reshape(values.shape[0] // per, per, values.shape[1])
    return _to_int32(sum(chunks[:, j] << (bits * j) for j in range(per)))


def _pack_along_cols(values: torch.Tensor, bits: int, order: tuple[int, ...] | None = None) -> torch.Tensor:
    """[rows, cols] -> int32 [rows, cols * bits / 32]; field j of a word holds column order[j] of its 8."""
    per = 32 // bits
    order = order or tuple(range(per))
    chunks = values.reshape(values.shape[0], values.shape[1] // per, per)
    return _to_int32(sum(chunks[..., order[j]] << (bits * j) for j in range(per)))


def gptq(
    group: int, bits: int = 4, symmetric: bool = True, v2: bool = False, act_order: bool = False
) -> Packer:
    def pack(weight: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        in_features = weight.shape[1]
        size = group if group > 0 else in_features
        order = torch.randperm(in_features, generator=torch.Generator().manual_seed(in_features))
        g_idx = torch.empty(in_features, dtype=torch.int64)
        g_idx[order if act_order else torch.arange(in_features)] = torch.arange(in_features) // size
        codes, scales, zeros = _grid(weight, size, bits, symmetric, g_idx)
        stored_zeros = zeros if v2 else zeros - 1  # classic GPTQ packs each zero point minus one
        tensors = {
            "qweight": _pack_along_rows(codes.t(), bits),
            "qzeros": _pack_along_cols((stored_zeros.t() & ((1 << bits) - 1)), bits),
            "scales": scales.t().half().contiguous(),
            "g_idx": g_idx.to(torch.int32),
        }
        return tensors, (codes - zeros[:, g_idx]).float() * scales[:, g_idx]

    return pack


def awq(group: int) -> Packer:
    def pack(weight: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        g_idx = torch.arange(weight.shape[1]) // group
        codes, scales, zeros = _grid(weight, group, 4, False, g_idx)
        tensors = {
            "qweight": _pack_along_cols(codes.t().contiguous(), 4, AWQ_ORDER),
            "qzeros": _pack_along_cols(zeros.t().contiguous(), 4, AWQ_ORDER),
            "scales": scales.t().half().contiguous(),
        }
        return tensors, (codes - zeros[:, g_idx]).float() * scales[:, g_idx]

    return pack


def compressed(
    strategy: str, symmetric: bool = True, bits: int = 4, kind: str = "int", group: int = 128
) -> Packer:
    """The compressed-tensors package's own compressor (pack-quantized int4, float-quantized fp8)."""
    from compressed_tensors.compressors.naive_quantized.base import NaiveQuantizationCompressor
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams

    args = QuantizationArgs(
        num_bits=bits,
        type=kind,
        symmetric=symmetric,
        strategy=strategy,
        group_size=group if strategy == "group" else None,
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    compressor = PackedQuantizationCompressor if kind == "int" else NaiveQuantizationCompressor

    def pack(weight: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        if strategy == "group":
            blocks = weight.reshape(weight.shape[0], -1, group)
        elif strategy == "channel":
            blocks = weight.reshape(weight.shape[0], 1, -1)
        else:
            blocks = weight.reshape(1, 1, -1)
        scale, zero_point = calculate_qparams(blocks.amin(-1), blocks.amax(-1), args)
        state = {"weight": weight, "weight_scale": scale, "weight_zero_point": zero_point}
        tensors = compressor.compress(state, scheme)
        dequantized = compressor.decompress(dict(tensors), scheme)["weight"].float()
        return tensors, dequantized

    return pack


def compressed_config(weights: dict, form: str, activations: dict | None = None) -> dict:
    return {
        "quant_method": "compressed-tensors",
        "format": form,
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": weights, "input_activations": activations}
        },
        "ignore": ["lm_head"],
    }


def write_quantized(
    source: Path, target: Path, pack: Packer, config: dict, keep: Callable[[str], bool] = lambda _: False
) -> dict[str, torch.Tensor]:
    """`source` with its projections packed by `pack` (but those `keep` names, stored as they are); returns the
    float state dict of the dequantized model."""
    target.mkdir()
    state = load_file(str(source / "model.safetensors"))
    stored: dict[str, torch.Tensor] = {}
    reference = dict(state)
    for name, tensor in state.items():
        base = name.removesuffix(".weight")
        if name.endswith(".weight") and base.rsplit(".", 1)[-1] in PROJECTIONS and not keep(name):
            tensors, dequantized = pack(tensor.float())
            stored.update({f"{base}.{suffix}": value.contiguous() for suffix, value in tensors.items()})
            reference[name] = dequantized
        else:
            stored[name] = tensor
    save_file(stored, str(target / "model.safetensors"), metadata={"format": "pt"})
    for path in source.iterdir():
        if path.name != "model.safetensors":
            shutil.copy2(path, target / path.name)
    raw = json.loads((target / "config.json").read_text())
    raw["quantization_config"] = config
    (target / "config.json").write_text(json.dumps(raw))
    return reference
