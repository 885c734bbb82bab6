"""Sizes the KV cache from a memory budget after profiling one forward pass at the step's token budget.

The arithmetic is `switchyard.kv_budget`'s, shared with `switchyard plan`; this module adds what only a live
engine knows: torch dtypes, the loaded model's bytes, measured and available memory.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

import psutil
import torch

from switchyard import kv_budget
from switchyard.models.config import ModelArchConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KVCacheBudget:
    weights_bytes: int
    activation_bytes: int
    kv_bytes_per_token: int
    """2 (K and V) x layers x kv_heads x head_dim x dtype bytes."""
    block_size: int
    num_blocks: int
    max_model_len: int
    budget_bytes: int
    """Memory granted to the KV cache before capping to what max_num_seqs could ever use."""
    draft_kv_bytes_per_token: int = 0
    """The speculative draft model's KV bytes per token: its cache has as many blocks as the target's (one
    shadow per target sequence), so every block of the budget pays for both."""
    draft_weights_bytes: int = 0

    @property
    def kv_cache_bytes(self) -> int:
        """Both caches, target and draft."""
        return self.num_blocks * self.block_size * (self.kv_bytes_per_token + self.draft_kv_bytes_per_token)

    @property
    def max_concurrent_seqs_at_max_len(self) -> float:
        return self.num_blocks * self.block_size / self.max_model_len

    def describe(self) -> str:
        mib = 1 << 20
        draft = ""
        if self.draft_kv_bytes_per_token:
            weights = self.draft_weights_bytes / mib
            draft = f", draft weights {weights:.1f} MiB and KV {self.draft_kv_bytes_per_token} B/token"
        elif self.draft_weights_bytes:  # a speculator: weights, no cache of its own
            draft = f", speculator weights {self.draft_weights_bytes / mib:.1f} MiB"
        return (
            f"weights {self.weights_bytes / mib:.1f} MiB, activations {self.activation_bytes / mib:.1f} MiB, "
            f"KV {self.kv_bytes_per_token} B/token{draft}, {self.num_blocks} blocks of {self.block_size} tokens "
            f"({self.kv_cache_bytes / mib:.1f} MiB), {self.max_concurrent_seqs_at_max_len:.2f} sequences "
            f"at max_model_len {self.max_model_len}"
        )


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def kv_bytes_per_token(config: ModelArchConfig, dtype: torch.dtype) -> int:
    """2 (K and V) x layers x kv_heads x head_dim x `dtype`'s bytes (`kv_budget.kv_bytes_per_token`)."""
    return kv_budget.kv_bytes_per_token(config, element_size(dtype))


def model_bytes(model: torch.nn.Module) -> int:
    seen: set[int] = set()
    total = 0
    for param in model.parameters():
        if param.data_ptr() not in seen:
            seen.add(param.data_ptr())
            total += param.numel() * param.element_size()
    return total


def analytic_activation_bytes(config: ModelArchConfig, num_tokens: int, dtype: torch.dtype) -> int:
    """A floor for the activation peak when measurement is coarse (`kv_budget.activation_floor_bytes`)."""
    return kv_budget.activation_floor_bytes(config, num_tokens, element_size(dtype))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    return psutil.virtual_memory().available


def plan_budget(
    *,
    config: ModelArchConfig,
    dtype: torch.dtype,
    device: torch.device,
    weights_bytes: int,
    activation_bytes: int,
    block_size: int,
    max_model_len: int,
    max_num_seqs: int,
    kv_cache_memory: int | None,
    memory_utilization: float | None,
    available_after_profile: int,
    draft_config: ModelArchConfig | None = None,
    draft_weights_bytes: int = 0,
) -> KVCacheBudget:
    """Blocks the KV cache gets. Raises ValueError when not even one block fits. `dtype` is the cache's storage
    dtype (`kv_cache_dtype`), which may be narrower than the model's.

    With a speculative draft model (`draft_config`), each block holds the target's KV and the draft's, so an
    explicit `kv_cache_memory` covers both caches. Load the draft before measuring `available_after_profile`,
    so its weights are already out of what is available.
    """
    per_token = kv_bytes_per_token(config, dtype)
    draft_per_token = kv_bytes_per_token(draft_config, dtype) if draft_config is not None else 0
    if kv_cache_memory is not None:
        budget = kv_cache_memory
    else:
        on_gpu = device.type == "cuda"
        budget = kv_budget.kv_budget_bytes(
            # Weights are already resident, so they are no longer in `available`.
            available_bytes=available_after_profile,
            activation_bytes=activation_bytes,
            utilization=memory_utilization or kv_budget.default_memory_utilization(on_gpu),
            device_total_bytes=torch.cuda.get_device_properties(device).total_memory if on_gpu else None,
        )
    blocks_per_seq = kv_budget.blocks_for(max_model_len, block_size)
    num_blocks = min(
        kv_budget.kv_blocks(budget, per_token + draft_per_token, block_size), max_num_seqs * blocks_per_seq
    )
    plan = KVCacheBudget(
        weights_bytes=weights_bytes,
        activation_bytes=activation_bytes,
        kv_bytes_per_token=per_token,
        block_size=block_size,
        num_blocks=int(num_blocks),
        max_model_len=max_model_len,
        budget_bytes=budget,
        draft_kv_bytes_per_token=draft_per_token,
        draft_weights_bytes=draft_weights_bytes,
    )
    if num_blocks < 1:
        raise ValueError(
            f"KV cache budget too small for even one block: {plan.describe()}. "
            "Raise --kv-cache-memory / --memory-utilization or use a smaller --max-num-batched-tokens."
        )
    if num_blocks < blocks_per_seq and config.release_window is None:  # a window bounds what a request holds
        logger.warning(
            "KV cache holds fewer tokens (%d) than max_model_len (%d); longer requests are rejected at admission",
            num_blocks * block_size,
            max_model_len,
        )
    return plan
