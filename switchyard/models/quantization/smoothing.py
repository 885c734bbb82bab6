"""SmoothQuant: move activation outliers into the weights before w8a8, so per-token int8 activations lose less.

A few input channels of a projection carry activations tens of times larger than the rest; one int8 scale per
token then spends its range on them. For the projections that read a norm's output (q/k/v and gate/up), each
channel j is divided by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) in the norm's weight and multiplied by s_j
in the projections' weight columns: the product is unchanged in exact arithmetic, and both factors quantize
better. max|X_j| comes from running calibration text through the model (transformers, float32).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

SMOOTHING_CLAMP = (1e-4, 1e4)


@dataclass(frozen=True)
class SmoothedGroup:
    """A norm and the projections that read its output."""

    norm: nn.Module
    projections: tuple[nn.Linear, ...]


def smoothed_groups(model: nn.Module) -> list[SmoothedGroup]:
    """Each decoder layer's (input norm -> q, k, v) and (post-attention norm -> gate, up) of a transformers
    Llama-family model."""
    groups = []
    for layer in model.model.layers:  # type: ignore[union-attr]
        attention, mlp = layer.self_attn, layer.mlp
        groups.append(
            SmoothedGroup(layer.input_layernorm, (attention.q_proj, attention.k_proj, attention.v_proj))
        )
        groups.append(SmoothedGroup(layer.post_attention_layernorm, (mlp.gate_proj, mlp.up_proj)))
    return groups


@torch.no_grad()
def activation_maxima(
    model: nn.Module, groups: Sequence[SmoothedGroup], batches: Iterable[torch.Tensor]
) -> list[torch.Tensor]:
    """max |x_j| per input channel of each group's projections over the calibration batches (token ids)."""
    maxima: list[torch.Tensor | None] = [None] * len(groups)

    def recorder(index: int):  # type: ignore[no-untyped-def]
        def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            seen = inputs[0].detach().abs().reshape(-1, inputs[0].shape[-1]).amax(dim=0).float()
            current = maxima[index]
            maxima[index] = seen if current is None else torch.maximum(current, seen)

        return hook

    handles = [
        group.projections[0].register_forward_pre_hook(recorder(index)) for index, group in enumerate(groups)
    ]
    try:
        for ids in batches:
            model(input_ids=ids)
    finally:
        for handle in handles:
            handle.remove()
    if any(found is None for found in maxima):
        raise ValueError("the calibration set is empty")
    return [found for found in maxima if found is not None]


@torch.no_grad()
def smooth(groups: Sequence[SmoothedGroup], maxima: Sequence[torch.Tensor], alpha: float = 0.5) -> None:
    """Fold the smoothing factors into each group's norm weight and projection columns, in place."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    for group, activation_max in zip(groups, maxima, strict=True):
        weight_max = torch.stack(
            [projection.weight.abs().amax(dim=0).float() for projection in group.projections]
        ).amax(dim=0)
        factors = (
            activation_max.clamp(min=1e-5).pow(alpha) / weight_max.clamp(min=1e-5).pow(1 - alpha)
        ).clamp(*SMOOTHING_CLAMP)
        norm_weight = group.norm.weight  # type: ignore[union-attr]
        norm_weight.div_(factors.to(norm_weight.dtype))
        for projection in group.projections:
            projection.weight.mul_(factors.to(projection.weight.dtype))
