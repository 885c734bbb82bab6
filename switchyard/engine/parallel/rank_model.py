"""One rank's model, prepared the same way on every rank: load, shard, quantize, pack."""

from __future__ import annotations

from pathlib import Path

import torch

from switchyard.models.config import ModelArchConfig
from switchyard.models.llama import LlamaForCausalLM
from switchyard.models.loader import load_model
from switchyard.models.packed_linear import pack_linear_layers
from switchyard.models.quantization.apply import quantize_model
from switchyard.models.quantization.checkpoint import checkpoint_quantization
from switchyard.models.quantization.methods import QuantizationSpec
from switchyard.models.tensor_parallel import RankCut, join_shards, rank_slices


def load_rank_model(
    folder: str | Path,
    dtype: torch.dtype,
    device: torch.device,
    max_model_len: int,
    quantization: str | None,
    rank: int,
    world_size: int,
    config: ModelArchConfig | None = None,
) -> LlamaForCausalLM:
    """Rank `rank`'s shard, quantized as asked (or as the checkpoint is); not yet packed (the caller decides).
    `config`: the folder's, adjusted (`with_long_context`; rank 0 only: other ranks read the folder's)."""
    if world_size > 1:
        # Each rank reads its own part of every tensor: its load never holds the whole model.
        whole = config or ModelArchConfig.from_folder(Path(folder))
        slices = rank_slices(whole, rank, world_size)
        cut = RankCut(whole, slices)
        model = join_shards(load_model(folder, dtype, device, max_model_len, config=whole, cut=cut), slices)
    else:
        model = load_model(folder, dtype, device, max_positions=max_model_len, config=config)
    spec = (
        QuantizationSpec(quantization) if quantization is not None else checkpoint_quantization(Path(folder))
    )  # type: ignore[arg-type]
    if spec is not None:
        quantize_model(model, spec)
    return model


def pack_rank_model(model: LlamaForCausalLM) -> None:
    pack_linear_layers(model)
