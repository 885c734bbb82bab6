"""Quantized checkpoints: the scheme a folder's `quantization_config` names (schemes.py), the engine's
quantization for it, and reading its stored projection weights as floats (plus the int4 grid they came from).

int8 (compressed-tensors, as `switchyard quantize` writes it) is read dequantized and quantized again per channel
at build: the same int8 values. int4 (GPTQ, AWQ, compressed-tensors pack-quantized) is read dequantized with its
grid attached to the layer, and the int4 layer is rebuilt from the checkpoint's own codes and grid. fp8 and 8-bit
GPTQ are dequantized to the model's dtype at load: this CPU has no kernel for them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from switchyard.models.quantization.int4_formats import DecodedWeight, decode, is_packed
from switchyard.models.quantization.methods import QuantizationSpec
from switchyard.models.quantization.schemes import (
    COMPRESSED_TENSORS,
    INT_FORMAT,
    CheckpointScheme,
    UnsupportedQuantizationError,
    parse_quantization_config,
)

__all__ = [
    "UnsupportedQuantizationError",
    "checkpoint_quantization",
    "checkpoint_scheme",
    "compressed_tensors_config",
    "read_weight",
]

logger = logging.getLogger(__name__)


def checkpoint_scheme(folder: Path) -> CheckpointScheme | None:
    """How the folder's projections are stored (None for a plain checkpoint); UnsupportedQuantizationError
    naming a scheme that is not implemented."""
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # the model config's own reader reports it
    return parse_quantization_config(raw, str(path)) if isinstance(raw, dict) else None


def checkpoint_quantization(folder: Path) -> QuantizationSpec | None:
    """The engine's quantization for the folder's stored weights (None: plain, or dequantized at load)."""
    scheme = checkpoint_scheme(folder)
    if scheme is None or scheme.engine_method is None:
        return None
    if scheme.engine_method == "int4":
        # per-channel grids are split into the kernel's groups of 128 (each repeats its row's scale and zero)
        return QuantizationSpec("int4", group_size=scheme.group_size or 128, prequantized=True)
    return QuantizationSpec(scheme.engine_method)  # type: ignore[arg-type]


def read_weight(
    scheme: CheckpointScheme | None,
    name: str,
    read: Callable[[str], torch.Tensor],
    has: Callable[[str], bool],
) -> DecodedWeight:
    """Checkpoint tensor `name` as floats (or as stored when it is not a quantized weight), with the int4 grid
    it was stored on when the int4 kernel can use that grid. `read`/`has` look tensors up by name."""
    base = name.removesuffix(".weight")
    if scheme is not None and name.endswith(".weight") and scheme.kind in ("gptq", "awq", "packed-int4"):
        if is_packed(scheme, base, has):
            return decode(scheme, base, read)
        return DecodedWeight(read(name), None)  # a layer the checkpoint left unquantized (its `ignore` list)
    tensor = read(name)
    if tensor.dtype not in (torch.int8, torch.float8_e4m3fn):
        return DecodedWeight(tensor, None)
    if scheme is None or not has(name + "_scale"):
        raise ValueError(f"{tensor.dtype} weight without a {name}_scale to dequantize it")
    scale = read(name + "_scale").float()
    scale = scale.reshape(-1, 1) if scale.numel() > 1 else scale.reshape(())  # per channel, or per tensor
    return DecodedWeight(tensor.float() * scale, None)


def log_dequantized(scheme: CheckpointScheme, dtype: torch.dtype, device: torch.device) -> None:
    """Say so when stored weights are widened at load rather than run as stored."""
    if scheme.engine_method is None:
        logger.warning(
            "%s %d-bit weights dequantized to %s at load: no %s matmul kernel on %s (the model takes its "
            "unquantized memory)",
            scheme.kind,
            scheme.bits,
            str(dtype).removeprefix("torch."),
            scheme.kind,
            device.type,
        )


def compressed_tensors_config(method: str) -> dict[str, Any]:
    """The `quantization_config` that `switchyard quantize` writes for int8 or w8a8."""
    weights = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False}
    activations = (
        {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
        if method == "w8a8"
        else None
    )
    return {
        "quant_method": COMPRESSED_TENSORS,
        "format": INT_FORMAT,
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": weights, "input_activations": activations}
        },
        "ignore": ["lm_head"],
    }
