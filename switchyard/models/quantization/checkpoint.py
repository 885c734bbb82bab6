"""Quantized checkpoints: what a folder's `quantization_config` says, and refusing what is not implemented.

Switchyard reads (and `switchyard quantize` writes) the compressed-tensors layout for int8: each quantized
projection's `weight` is int8 with a float `weight_scale` per output channel; w8a8 adds dynamic per-token int8
input activations (nothing stored). A checkpoint quantized any other way (GPTQ, AWQ, fp8, bitsandbytes, static
activation scales, ...) is refused by name: loading it as plain weights would silently drop its scales.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from switchyard.errors import ModelLoadError
from switchyard.models.quantization.methods import QuantizationSpec

FORMAT = "int-quantized"
QUANT_METHOD = "compressed-tensors"


class UnsupportedQuantizationError(ModelLoadError):
    """The checkpoint is quantized in a scheme the engine does not implement."""


def checkpoint_quantization(folder: Path) -> QuantizationSpec | None:
    """The folder's quantization (None for a plain checkpoint); UnsupportedQuantizationError naming the scheme."""
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # the model config's own reader reports it
    config = raw.get("quantization_config") or raw.get("compression_config")
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise UnsupportedQuantizationError("quantization_config is not a table", str(path))
    method = config.get("quant_method", "<no quant_method>")
    if method != QUANT_METHOD:
        raise UnsupportedQuantizationError(
            f"quantization {_describe(config)} is not implemented: Switchyard loads compressed-tensors int8 "
            "(per-channel weights) and w8a8 (plus dynamic per-token activations), as `switchyard quantize` "
            "writes them; or give --quantization int8|w8a8|int4 with an unquantized checkpoint",
            str(path),
        )
    return _compressed_tensors(config, path)


def dequantized(tensor: torch.Tensor, name: str, read: Any) -> torch.Tensor:
    """A checkpoint tensor as floats: an int8 `weight` times its `weight_scale` (read by name), else as is."""
    if tensor.dtype != torch.int8 or not name.endswith(".weight"):
        return tensor
    scale = read(name + "_scale").float()
    return tensor.float() * scale.reshape(-1, 1)


def compressed_tensors_config(method: str) -> dict[str, Any]:
    """The `quantization_config` that `switchyard quantize` writes for int8 or w8a8."""
    weights = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False}
    activations = (
        {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
        if method == "w8a8"
        else None
    )
    return {
        "quant_method": QUANT_METHOD,
        "format": FORMAT,
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": weights, "input_activations": activations}
        },
        "ignore": ["lm_head"],
    }


def _compressed_tensors(config: Mapping[str, Any], path: Path) -> QuantizationSpec:
    groups = config.get("config_groups") or {}
    if config.get("format", FORMAT) != FORMAT or len(groups) != 1:
        raise UnsupportedQuantizationError(
            f"compressed-tensors format {config.get('format')!r} with {len(groups)} group(s) is not "
            f"implemented (only {FORMAT!r} with one group)",
            str(path),
        )
    (group,) = groups.values()
    weights = group.get("weights") or {}
    activations = group.get("input_activations")
    expected_weights = (8, "int", True, "channel")
    found = (weights.get("num_bits"), weights.get("type"), weights.get("symmetric"), weights.get("strategy"))
    if found != expected_weights:
        raise UnsupportedQuantizationError(
            f"compressed-tensors weights {dict(weights)} are not implemented (only 8-bit symmetric int per "
            "channel)",
            str(path),
        )
    if activations is None:
        return QuantizationSpec("int8")
    if (
        activations.get("num_bits"),
        activations.get("type"),
        activations.get("dynamic"),
        activations.get("strategy"),
    ) != (
        8,
        "int",
        True,
        "token",
    ):
        raise UnsupportedQuantizationError(
            f"compressed-tensors input activations {dict(activations)} are not implemented (only dynamic "
            "per-token int8)",
            str(path),
        )
    return QuantizationSpec("w8a8")


def _describe(config: Mapping[str, Any]) -> str:
    details = [str(config.get("quant_method"))]
    for key in ("bits", "w_bit", "fmt", "format", "group_size", "q_group_size"):
        if key in config:
            details.append(f"{key}={config[key]}")
    return " ".join(details)
