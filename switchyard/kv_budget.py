"""The KV cache budget formula: bytes per token, the activation reserve, the bytes left for the cache, blocks.

Why one torch-free module: the engine sizes its cache with this arithmetic at start (`engine/memory.py`, from
measured memory) and `switchyard plan` answers the same question on paper (`plan/capacity.py`, from a device's
spec), so a plan and a real `switchyard serve` agree only while both run the same formula. It lives beside
`config` and `errors` rather than in `models/` because only part of it is a model property: the rest is a
memory policy (how a utilization fraction applies on an accelerator and on a CPU). It takes dtypes by name
and shapes as plain numbers, so the planner can use it without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from switchyard.models.config import ModelArchConfig

ELEMENT_BYTES: dict[str, int] = {
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
"""Bytes per element of each dtype name the engine takes (`--dtype`, `--kv-cache-dtype`); a test checks them
against torch's element sizes."""

DEFAULT_MEMORY_UTILIZATION_GPU = 0.9
"""An accelerator's fraction: of all its memory, weights included."""
DEFAULT_MEMORY_UTILIZATION_CPU = 0.5
"""A CPU's fraction: of the RAM still available once the weights are loaded (the rest is shared with the
machine's other work)."""


def element_bytes(dtype_name: str) -> int:
    """Bytes of one element of `dtype_name`; ValueError for a name the engine does not take."""
    try:
        return ELEMENT_BYTES[dtype_name]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype_name!r}; use one of {', '.join(ELEMENT_BYTES)}") from None


def default_memory_utilization(on_accelerator: bool) -> float:
    """The fraction of memory the engine takes when `--memory-utilization` is not given."""
    return DEFAULT_MEMORY_UTILIZATION_GPU if on_accelerator else DEFAULT_MEMORY_UTILIZATION_CPU


def kv_bytes_per_token(config: ModelArchConfig, element_size: int) -> int:
    """2 (K and V) x layers x KV heads x head_dim x `element_size` bytes."""
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * element_size


def activation_floor_bytes(config: ModelArchConfig, num_tokens: int, element_size: int) -> int:
    """A floor for the activation peak of a step of `num_tokens`: the widest per-layer tensors at once, plus
    float32 logits. The engine uses it where measurement is coarse; the planner reserves it."""
    width = config.hidden_size * 4 + config.q_size * 3 + config.kv_size * 4 + config.intermediate_size * 4
    return num_tokens * width * element_size + num_tokens * config.vocab_size * 4


def usable_bytes(*, available_bytes: int, utilization: float, device_total_bytes: int | None) -> int:
    """What the utilization fraction grants: on an accelerator (`device_total_bytes` given) a fraction of the
    whole device, weights included; on a CPU (None) a fraction of the RAM available once they are loaded."""
    return int((available_bytes if device_total_bytes is None else device_total_bytes) * utilization)


def kv_budget_bytes(
    *,
    available_bytes: int,
    activation_bytes: int,
    utilization: float,
    device_total_bytes: int | None,
) -> int:
    """Bytes left for the KV cache (negative when nothing is): the usable bytes less the activation reserve and,
    on an accelerator, less what is already in use there (the weights, and anything else on the device).

    `available_bytes` is the memory still free with the weights resident; `device_total_bytes` as in
    `usable_bytes`.
    """
    in_use = 0 if device_total_bytes is None else device_total_bytes - available_bytes
    usable = usable_bytes(
        available_bytes=available_bytes, utilization=utilization, device_total_bytes=device_total_bytes
    )
    return usable - in_use - activation_bytes


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens (whole blocks)."""
    return -(-num_tokens // block_size)


def kv_blocks(budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """Whole blocks of `block_size` tokens that fit in `budget_bytes`; 0 when the budget is negative.
    `bytes_per_token` counts every cache a block pays for (a speculative draft's beside the target's)."""
    return max(budget_bytes, 0) // (bytes_per_token * block_size)
