"""SmoothQuant: move activation outliers into the weights before w8a8, so per-token int8 activations lose less.

A few input channels of a projection carry activations tens of times larger than the rest; one int8 scale per
token then spends its range on them. For the projections that read a norm's output (q/k/v and gate/up), each
channel j is divided by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) in the norm's weight and multiplied by s_j
in the projections' weight columns: the product is unchanged in exact arithmetic, and both factors quantize
better. max|X_j| comes from running calibration text through the model (transformers, float32).

In a mixture the post-attention norm feeds the router, every expert's gate/up and the shared expert (and its
gate): all of them take the factors, so the router's logits are unchanged; the factors come from the weights
that will be quantized (the experts' and the shared expert's), as the dense MLP's come from gate and up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

SMOOTHING_CLAMP = (1e-4, 1e4)


@dataclass(frozen=True)
class SmoothedGroup:
    """A norm and the weights that read its output (their last axis is the norm's channels)."""

    norm: nn.Module
    observed: nn.Module
    """The module whose input is the norm's output: its activations are recorded."""
    weights: tuple[torch.Tensor, ...]
    """Every weight reading the norm's output: each is multiplied by the factors."""
    quantized: tuple[torch.Tensor, ...]
    """Those of `weights` that will be quantized: their column maxima set the factors."""


def smoothed_groups(model: nn.Module) -> list[SmoothedGroup]:
    """Each decoder layer's (input norm -> q, k, v) and (post-attention norm -> gate, up; or, in a mixture, the
    router, the experts' gate/up and the shared expert) of a transformers Llama-family model."""
    groups = []
    for layer in model.model.layers:  # type: ignore[union-attr]
        attention, mlp = layer.self_attn, layer.mlp
        qkv = (attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight)
        groups.append(SmoothedGroup(layer.input_layernorm, attention.q_proj, qkv, qkv))
        experts = getattr(mlp, "experts", None)
        if experts is None:
            gate_up = (mlp.gate_proj.weight, mlp.up_proj.weight)
            groups.append(SmoothedGroup(layer.post_attention_layernorm, mlp.gate_proj, gate_up, gate_up))
            continue
        quantized = [experts.gate_up_proj]  # [experts, 2 x inner, hidden], transformers' fused layout
        shared = getattr(mlp, "shared_expert", None)
        if shared is not None:
            quantized += [shared.gate_proj.weight, shared.up_proj.weight]
        others = [mlp.gate.weight]
        shared_gate = getattr(mlp, "shared_expert_gate", None)
        if shared_gate is not None:
            others.append(shared_gate.weight)
        groups.append(
            SmoothedGroup(layer.post_attention_layernorm, mlp, (*quantized, *others), tuple(quantized))
        )
    return groups


def _column_maxima(weight: torch.Tensor) -> torch.Tensor:
    """max |w| over everything but the last (input) axis."""
    return weight.detach().abs().reshape(-1, weight.shape[-1]).amax(dim=0).float()


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
        group.observed.register_forward_pre_hook(recorder(index)) for index, group in enumerate(groups)
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
        weight_max = torch.stack([_column_maxima(weight) for weight in group.quantized]).amax(dim=0)
        factors = (
            activation_max.clamp(min=1e-5).pow(alpha) / weight_max.clamp(min=1e-5).pow(1 - alpha)
        ).clamp(*SMOOTHING_CLAMP)
        norm_weight = group.norm.weight  # type: ignore[union-attr]
        norm_weight.div_(factors.to(norm_weight.dtype))
        for weight in group.weights:
            weight.mul_(factors.to(weight.dtype))
