"""Whether an int4 model splits over tensor-parallel ranks: the row-parallel projections (o_proj, down_proj) are
split by input column, and each rank's columns must be whole int4 groups, for the grouped kernel keeps one
scale and zero point per group of its own inputs (a group cut in two would need its scale on both ranks). The
engine refuses such a split before any rank starts, and `switchyard plan` refuses it too (torch-free)."""

from __future__ import annotations

from switchyard.models.config import ModelArchConfig


class Int4SplitError(ValueError):
    """An int4 layer's groups would be cut between ranks; the message names the layer, group and rank count."""


def check_int4_split(config: ModelArchConfig, world_size: int, group_size: int) -> None:
    """Raise Int4SplitError unless each rank's share of o_proj's and every down projection's inputs (the dense
    MLP's, each expert's, the shared expert's) is whole groups."""
    if world_size == 1:
        return
    moe = config.moe
    layers = [("self_attn.o_proj", config.q_size)]
    if moe is None or len(moe.sparse_layers) < config.num_hidden_layers:
        layers.append(("mlp.down_proj", config.intermediate_size))
    if moe is not None and moe.sparse_layers:
        layers.append(("mlp.experts.down_proj", moe.expert_intermediate_size))
        if moe.has_shared_expert:
            layers.append(("mlp.shared_expert.down_proj", moe.shared_expert_intermediate_size))
    for layer, inputs in layers:
        per_rank = inputs // world_size
        if per_rank % group_size:
            raise Int4SplitError(int4_split_message(layer, per_rank, group_size, world_size))


def int4_split_message(layer: str, per_rank: int, group_size: int, world_size: int) -> str:
    return (
        f"int4 {layer}: with --tensor-parallel-size {world_size} each rank holds {per_rank} of its input "
        f"columns, not a multiple of the int4 group size {group_size} (a group would be cut between ranks); "
        "use a tensor-parallel size that keeps whole groups on each rank, or a checkpoint with smaller groups"
    )
