"""Swapping a loaded model's decoder projections for quantized ones, in place, before the KV cache is sized
(so the cache gets the memory the smaller weights free)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn

from switchyard.models.quantization.int4_formats import CHECKPOINT_GRID
from switchyard.models.quantization.int4_linear import Int4Linear
from switchyard.models.quantization.int8_linear import Int8Linear
from switchyard.models.quantization.methods import QUANTIZED_MODULES, QuantizationSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuantizedWeights:
    """What quantization changed: the layers swapped and their weight bytes before and after (scales included)."""

    layers: int
    bytes_before: int
    bytes_after: int

    @property
    def bytes_saved(self) -> int:
        return self.bytes_before - self.bytes_after


def quantize_model(model: nn.Module, spec: QuantizationSpec) -> QuantizedWeights:
    """Replace every decoder projection (`QUANTIZED_MODULES`) by its quantized form."""
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in QUANTIZED_MODULES
    ]
    before = after = swapped = 0
    for name, linear in targets:
        quantized = _quantized(linear, spec)
        if quantized is None:
            continue
        before += _tensor_bytes(linear.weight, linear.bias)
        after += sum(_tensor_bytes(buffer) for buffer in _own_buffers(quantized))
        swapped += 1
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, quantized)
    if spec.prequantized and swapped < len(targets):
        logger.warning(
            "%d of %d projections stay in the model's dtype: the checkpoint stores them unquantized, or on a grid "
            "the int4 kernel cannot take as stored (act-order groups, 8 bits)",
            len(targets) - swapped,
            len(targets),
        )
    logger.info(
        "%s %d projections to %s: %.1f MiB of weights -> %.1f MiB",
        "loaded the checkpoint's codes for" if spec.prequantized else "quantized",
        swapped,
        spec.method,
        before / 2**20,
        after / 2**20,
    )
    return QuantizedWeights(swapped, before, after)


def quantized_buffer_bytes(model: nn.Module) -> int:
    """The bytes held by quantized layers (their weights are buffers, which `model.parameters()` misses)."""
    return sum(
        _tensor_bytes(*_own_buffers(module))
        for module in model.modules()
        if isinstance(module, Int8Linear | Int4Linear)
    )


def _quantized(linear: nn.Linear, spec: QuantizationSpec) -> nn.Module | None:
    """The quantized layer; None to keep `linear` (a pre-quantized checkpoint's layer with no usable grid)."""
    if spec.method == "int4":
        grid = getattr(linear, CHECKPOINT_GRID, None)
        if grid is None and spec.prequantized:
            return None
        return Int4Linear(linear, spec.group_size, grid)
    return Int8Linear(linear, dynamic_activations=spec.method == "w8a8")


def _own_buffers(module: nn.Module) -> list[torch.Tensor]:
    # the weight scale is kept twice (float32 for w8a8, the model's dtype for the weight-only kernel): both count
    return [buffer for buffer in module.buffers(recurse=False) if buffer is not None]


def _tensor_bytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
