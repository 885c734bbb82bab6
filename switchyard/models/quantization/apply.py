"""Swapping a loaded model's decoder projections (and a mixture's routed experts) for quantized ones, in place,
before the KV cache is sized (so the cache gets the memory the smaller weights free)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn

from switchyard.models.moe import SparseMoeBlock
from switchyard.models.quantization.int4_formats import CHECKPOINT_EXPERT_GRIDS, CHECKPOINT_GRID, Int4Grid
from switchyard.models.quantization.int4_linear import Int4Linear
from switchyard.models.quantization.int8_linear import Int8Linear
from switchyard.models.quantization.methods import QUANTIZED_MODULES, QuantizationSpec
from switchyard.models.quantization.quantized_experts import QuantizedExperts

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
    """Replace every decoder projection (`QUANTIZED_MODULES`) and every mixture's routed experts by their
    quantized forms. `layers` counts projections, each expert's gate/up and down included."""
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in QUANTIZED_MODULES
    ]
    blocks = [module for module in model.modules() if isinstance(module, SparseMoeBlock)]
    before = after = swapped = 0
    for name, linear in targets:
        quantized = _quantized(linear, spec, getattr(linear, CHECKPOINT_GRID, None))
        if quantized is None:
            continue
        before += _tensor_bytes(linear.weight, linear.bias)
        after += sum(_tensor_bytes(buffer) for buffer in _own_buffers(quantized))
        swapped += 1
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, quantized)
    expert_layers = 0
    for block in blocks:
        expert_layers += 2 * block.moe.num_experts
        stacked = _tensor_bytes(block.experts_gate_up, block.experts_down)
        experts = _quantized_experts(block, spec)
        if experts is None:
            continue
        block.use_quantized_experts(experts)
        before += stacked
        after += quantized_buffer_bytes(experts)
        swapped += 2 * block.moe.num_experts
    if spec.prequantized and swapped < len(targets) + expert_layers:
        logger.warning(
            "%d of %d projections stay in the model's dtype: the checkpoint stores them unquantized, or on a grid "
            "the int4 kernel cannot take as stored (act-order groups, 8 bits)",
            len(targets) + expert_layers - swapped,
            len(targets) + expert_layers,
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


def _quantized(linear: nn.Linear, spec: QuantizationSpec, grid: Int4Grid | None) -> nn.Module | None:
    """The quantized layer; None to keep `linear` (a pre-quantized checkpoint's layer with no usable grid)."""
    if spec.method == "int4":
        if grid is None and spec.prequantized:
            return None
        return Int4Linear(linear, spec.group_size, grid)
    return Int8Linear(linear, dynamic_activations=spec.method == "w8a8")


def _quantized_experts(block: SparseMoeBlock, spec: QuantizationSpec) -> QuantizedExperts | None:
    """The block's experts as quantized layers; None to keep them stacked in dtype (a pre-quantized int4
    checkpoint that does not store every expert on a grid the kernel takes)."""
    gate_up, down = block.experts_gate_up, block.experts_down
    if gate_up is None or down is None:  # already quantized
        return None
    grids = None
    if spec.method == "int4" and spec.prequantized:
        stored = getattr(block, CHECKPOINT_EXPERT_GRIDS, None) or {}
        if "experts_gate_up" not in stored or "experts_down" not in stored:
            return None
        grids = (stored["experts_gate_up"], stored["experts_down"])

    def make(linear: nn.Linear, grid: Int4Grid | None) -> nn.Module:
        quantized = _quantized(linear, spec, grid)
        assert quantized is not None  # int4 without a grid returns None only for pre-quantized checkpoints
        return quantized

    return QuantizedExperts.build(gate_up.detach(), down.detach(), make, grids)


def _own_buffers(module: nn.Module) -> list[torch.Tensor]:
    # the weight scale is kept twice (float32 for w8a8, the model's dtype for the weight-only kernel): both count
    return [buffer for buffer in module.buffers(recurse=False) if buffer is not None]


def _tensor_bytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
