"""Linear layers with weights pre-packed into oneDNN's blocked layout, for CPU inference.

On this class of CPU, `torch.nn.functional.linear` on plain row-major weights reaches about half the memory
bandwidth for the skinny matrix products of decode (a few rows of activations against a large weight); the
pre-packed oneDNN path reaches about 80% of it, and is faster at every batch size measured (see
benchmarks/RESULTS.md). Packing is a load-time transformation: the layer keeps its shapes and results.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from switchyard.models.cpu_bf16 import cpu_has_native_bf16
from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.bf16_linear import NativeBf16Linear, can_use_native_bf16

logger = logging.getLogger(__name__)

PACKABLE_DTYPES = (torch.float32, torch.bfloat16)
_PACKED_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
DUAL_LAYOUT_MAX_BYTES = 256 << 20
"""A model whose bf16 projections total at most this keeps them in both layouts at any batch size: plain for the
native decode step of a few rows, oneDNN-packed for larger products. Doubling at most this much memory makes a
small model's single-stream decode a few times faster (the bundled chat model: 2.6 -> 0.8 ms a token)."""
_ROUTER_MODULES = ("gate", "shared_expert_gate")
"""A mixture's routers: a few rows of output each, so the native bf16 kernel serves them at any batch (its
`F.linear` fallback is cheap at this size), and the native decode step and the operator path route alike."""


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN packs float32 on any x86 CPU, bf16 only where it computes bf16 natively (it refuses elsewhere)."""
    return (
        device.type == "cpu"
        and dtype in PACKABLE_DTYPES
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and (dtype != torch.bfloat16 or cpu_has_native_bf16())
    )


class PackedLinear(nn.Module):
    """y = x W^T + b with W held in oneDNN's packed layout (not a regular tensor: read-only, no state dict)."""

    def __init__(self, linear: nn.Linear, batch_size_hint: int = 1) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_size_hint)
        self.register_buffer("packed_weight", packed, persistent=False)
        bias = linear.bias.detach() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed"


def pack_linear_layers(model: nn.Module, every_linear: bool = False, max_rows: int | None = None) -> int:
    """Replace the model's projection layers (with `every_linear`, all its nn.Linear layers) by PackedLinear
    in place; returns how many were replaced.

    With `max_rows` (the most sequences a decode step carries) at most `skinny_matmul.MAX_ROWS`, bf16 layers
    become NativeBf16Linear instead: its kernel streams the plain weight about a third faster than oneDNN's
    packed one at 1-8 rows, but from 16 rows on the packed layout is 20-30% faster, and holding both would
    double the weights' memory. So a latency-tuned engine (`--max-num-seqs 8` or fewer) gets the native
    kernel and a batch-serving one keeps the packed weights, unless the projections are small enough to hold
    twice (`DUAL_LAYOUT_MAX_BYTES`): then they keep both.

    A tied LM head gets a packed copy of its weight, since the embedding lookup needs the plain layout. A
    mixture's routers become NativeBf16Linear whatever `max_rows` (`_ROUTER_MODULES`), else stay as they are.
    """
    targets, routers = [], []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            short = name.rsplit(".", 1)[-1]
            if short in _ROUTER_MODULES and not every_linear:
                routers.append((name, module))
            elif every_linear or short in _PACKED_MODULES:
                targets.append((name, module))
    for name, module in routers:
        if can_use_native_bf16(module):
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name), attr, NativeBf16Linear(module))
    native = max_rows is not None and max_rows <= skinny_matmul.MAX_ROWS
    dual = not native and not every_linear and _projection_bytes(targets) <= DUAL_LAYOUT_MAX_BYTES
    kinds = {"packed": 0, "native": 0, "both": 0}
    for name, module in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if (native or dual) and can_use_native_bf16(module):
            replacement: nn.Module = NativeBf16Linear(module, packed=dual)
            kinds["both" if dual else "native"] += 1
        else:
            replacement = PackedLinear(module)
            kinds["packed"] += 1
        setattr(parent, attr, replacement)
    logger.info(
        "linear layers: %d packed into the oneDNN layout, %d on the native bf16 decode kernel, %d in both",
        kinds["packed"],
        kinds["native"],
        kinds["both"],
    )
    return len(targets)


def dual_layout_bytes(model: nn.Module) -> int:
    """The memory the packed copies of dual-layout layers add (`DUAL_LAYOUT_MAX_BYTES`), for the KV budget."""
    return sum(m.packed_copy_bytes for m in model.modules() if isinstance(m, NativeBf16Linear))


def _projection_bytes(targets: list[tuple[str, nn.Module]]) -> int:
    return sum(module.weight.numel() * module.weight.element_size() for _, module in targets)
