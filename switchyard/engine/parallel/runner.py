"""Rank 0's model runner under tensor parallelism: the same runner, whose model calls and cache copies are
first broadcast to the worker ranks so that they run the same collectives in the same order."""

from __future__ import annotations

from typing import Any

import torch

from switchyard.engine.model_runner import ModelRunner
from switchyard.engine.parallel.group import TensorParallelGroup
from switchyard.models.llama import KVCaches, LlamaForCausalLM


class _BroadcastingModel:
    """Stands for the shard where ModelRunner calls its model: tells the workers, then runs rank 0's part."""

    def __init__(self, model: LlamaForCausalLM, group: TensorParallelGroup) -> None:
        self._model = model
        self._group = group
        self.config = model.config
        self.rotary = model.rotary

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: KVCaches, metadata: Any
    ) -> torch.Tensor:
        self._group.command("forward", input_ids.cpu(), positions.cpu(), metadata)
        return self._model(input_ids, positions, kv_caches, metadata)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        self._group.command("logits", hidden.cpu())
        return self._model.compute_logits(hidden)


class TensorParallelRunner(ModelRunner):
    def __init__(
        self,
        model: LlamaForCausalLM,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
        kv_dtype: torch.dtype | None = None,
        *,
        group: TensorParallelGroup,
    ) -> None:
        super().__init__(model, num_blocks, block_size, dtype, device, kv_dtype)
        group.command("cache", num_blocks, block_size, dtype, kv_dtype)
        self.model = _BroadcastingModel(model, group)  # type: ignore[assignment]
        self._group = group

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        if copies:
            self._group.command("copy", copies)
        super().copy_blocks(copies)
