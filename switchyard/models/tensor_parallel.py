"""Tensor parallelism of the Llama family: what one rank loads of a checkpoint, and the layers that join shards.

Megatron's split, which needs one all-reduce per half-layer: q/k/v and gate/up are split by output (each rank
computes its own heads and its own slice of the MLP), o and down by input (each rank's product is a partial sum,
all-reduced). The embedding and the LM head are split by vocabulary: a rank looks up only the ids in its range
(zeros elsewhere, all-reduced: exact) and computes its slice of the logits (all-gathered). KV heads are split
with the query heads that read them; with fewer KV heads than ranks, each rank keeps the one KV head its query
heads share (replicated, as `switchyard plan` counts it).

A mixture of experts splits each expert as a dense MLP is split (vLLM's tensor-parallel MoE): every rank holds
every expert, with its slice of the expert's inner width (gate/up by output row, down by input column), and the
shared expert likewise; the router is whole on every rank, so all ranks choose the same experts, and the block's
partial sums are all-reduced once, as a dense MLP's are.

int4 layers stay int4 on every rank: a pre-quantized checkpoint's grid is sliced with the weight (by output row
for q/k/v and gate/up, by whole input groups for o and down), and `--quantization int4` quantizes each shard,
whose groups are the unsplit model's. A split that would cut an int4 group in two is refused
(`quantization/int4_split.py`).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from switchyard.models.config import ModelArchConfig
from switchyard.models.llama import LlamaForCausalLM, ShardIndex
from switchyard.models.quantization.int4_formats import Int4Grid
from switchyard.models.quantization.int4_split import Int4SplitError, int4_split_message


class TensorParallelConfigError(ValueError):
    """The model cannot be split over that many ranks; the message says which size does not divide."""


@dataclasses.dataclass(frozen=True)
class RankSlices:
    """Which heads, MLP columns and vocabulary rows one rank holds."""

    rank: int
    world_size: int
    q_heads: tuple[int, int]
    kv_heads: tuple[int, int]
    intermediate: tuple[int, int]
    vocab: tuple[int, int]
    expert_inner: tuple[int, int] = (0, 0)
    """Each routed expert's inner columns this rank holds (a mixture; (0, 0) for a dense model)."""
    shared_inner: tuple[int, int] = (0, 0)
    """The shared expert's inner columns this rank holds (Qwen2-MoE)."""


def _split(size: int, rank: int, world_size: int) -> tuple[int, int]:
    share = size // world_size
    return rank * share, (rank + 1) * share


def rank_slices(config: ModelArchConfig, rank: int, world_size: int) -> RankSlices:
    heads, kv_heads, moe = config.num_attention_heads, config.num_key_value_heads, config.moe
    dense_layers = config.num_hidden_layers - (len(moe.sparse_layers) if moe is not None else 0)
    checks = [("num_attention_heads", heads), ("vocab_size", config.vocab_size)]
    if dense_layers:
        checks.append(("intermediate_size", config.intermediate_size))
    if moe is not None and moe.sparse_layers:
        checks.append(("the experts' intermediate size", moe.expert_intermediate_size))
        if moe.has_shared_expert:
            checks.append(("shared_expert_intermediate_size", moe.shared_expert_intermediate_size))
    for name, size in checks:
        if size % world_size:
            raise TensorParallelConfigError(
                f"{name} {size} is not divisible by --tensor-parallel-size {world_size}"
            )
    if kv_heads % world_size and world_size % kv_heads:
        raise TensorParallelConfigError(
            f"num_key_value_heads {kv_heads} and --tensor-parallel-size {world_size}: one must divide the other"
        )
    q_per_rank = heads // world_size
    if kv_heads >= world_size:
        kv_per_rank = kv_heads // world_size
        kv_range = (rank * kv_per_rank, (rank + 1) * kv_per_rank)
    else:  # replicated: the KV head of this rank's query heads (they sit in one group when ranks >= KV heads)
        group = heads // kv_heads
        first = rank * q_per_rank // group
        kv_range = (first, first + 1)
    return RankSlices(
        rank=rank,
        world_size=world_size,
        q_heads=(rank * q_per_rank, (rank + 1) * q_per_rank),
        kv_heads=kv_range,
        intermediate=_split(config.intermediate_size, rank, world_size),
        vocab=_split(config.vocab_size, rank, world_size),
        expert_inner=_split(moe.expert_intermediate_size, rank, world_size) if moe is not None else (0, 0),
        shared_inner=(
            _split(moe.shared_expert_intermediate_size, rank, world_size) if moe is not None else (0, 0)
        ),
    )


def local_config(config: ModelArchConfig, slices: RankSlices) -> ModelArchConfig:
    """The shape of one rank's shard (vocabulary size unchanged: the embedding and head are replaced)."""
    moe = config.moe
    if moe is not None:
        moe = dataclasses.replace(
            moe,
            expert_intermediate_size=slices.expert_inner[1] - slices.expert_inner[0],
            shared_expert_intermediate_size=slices.shared_inner[1] - slices.shared_inner[0],
        )
    return dataclasses.replace(
        config,
        num_attention_heads=slices.q_heads[1] - slices.q_heads[0],
        num_key_value_heads=slices.kv_heads[1] - slices.kv_heads[0],
        intermediate_size=slices.intermediate[1] - slices.intermediate[0],
        moe=moe,
    )


@dataclasses.dataclass(frozen=True)
class RankCut:
    """What one rank keeps of each checkpoint tensor, cut as the loader reads it (models/loader.py), so a rank
    holds its shard and at most one whole checkpoint tensor at a time, never the whole model.

    q/k/v and gate/up keep the rank's output rows, o and down its input columns, the embedding and the LM head
    its vocabulary rows (each expert's and the shared expert's gate/up rows and down columns likewise); norms
    and routers stay whole. A pre-quantized int4 weight's grid is cut with it (rows keep their
    own groups; columns must hold whole groups, else Int4SplitError)."""

    config: ModelArchConfig
    """The unsplit model's shape (the checkpoint's)."""
    slices: RankSlices

    @property
    def local(self) -> ModelArchConfig:
        return local_config(self.config, self.slices)

    def part(self, param_name: str, shard: ShardIndex) -> tuple[int, int, int] | None:
        """(axis, start, end) of the rank's part of the checkpoint tensor for `param_name` (part `shard` of a
        fused one), or None where the rank keeps it whole."""
        head_dim, slices = self.config.head_dim, self.slices
        if param_name.endswith(".experts_gate_up"):
            return 0, *slices.expert_inner
        if param_name.endswith(".experts_down"):
            return 1, *slices.expert_inner
        if ".shared_expert.gate_up_proj." in param_name:
            return 0, *slices.shared_inner
        if param_name.endswith(".shared_expert.down_proj.weight"):
            return 1, *slices.shared_inner
        if ".qkv_proj." in param_name:
            heads = slices.q_heads if shard == 0 else slices.kv_heads
            return 0, heads[0] * head_dim, heads[1] * head_dim
        if param_name.endswith(".o_proj.weight"):
            return 1, slices.q_heads[0] * head_dim, slices.q_heads[1] * head_dim
        if ".gate_up_proj." in param_name:
            return 0, *slices.intermediate
        if param_name.endswith(".down_proj.weight"):
            return 1, *slices.intermediate
        if param_name in ("model.embed_tokens.weight", "lm_head.weight"):
            return 0, *slices.vocab
        return None

    def tensor(self, param_name: str, shard: ShardIndex, tensor: torch.Tensor) -> torch.Tensor:
        """The rank's part of a whole checkpoint tensor, as a tensor of its own (the whole one can be freed)."""
        part = self.part(param_name, shard)
        if part is None:
            return tensor
        axis, start, end = part
        return tensor.narrow(axis, start, end - start).clone(memory_format=torch.contiguous_format)

    def grid(self, param_name: str, shard: ShardIndex, grid: Int4Grid | None) -> Int4Grid | None:
        part = self.part(param_name, shard)
        if grid is None or part is None:
            return grid
        axis, start, end = part
        if axis == 0:
            return grid.rows(torch.arange(start, end))
        try:
            return grid.columns(start, end - start)
        except ValueError:
            layer = param_name.removesuffix(".weight")
            raise Int4SplitError(
                int4_split_message(layer, end - start, grid.group_size, self.slices.world_size)
            ) from None


def join_shards(
    model: LlamaForCausalLM, slices: RankSlices, group: dist.ProcessGroup | None = None
) -> LlamaForCausalLM:
    """A rank's shard, loaded with its `RankCut`, joined to the other ranks' by the collectives (`group`)."""
    for layer in model.model.layers:
        layer.self_attn = AllReducedOutput(layer.self_attn, group)
        layer.mlp = AllReducedOutput(layer.mlp, group)
    start, _ = slices.vocab
    model.model.embed_tokens = VocabParallelEmbedding(model.model.embed_tokens.weight, start, group)
    model.lm_head = VocabParallelHead(model.lm_head.weight, slices.world_size, group)
    return model.eval()


class AllReducedOutput(nn.Module):
    """An attention or MLP block whose last projection is split by input: its output on each rank is a partial
    sum, all-reduced into the full one. (Wrapping the block, not the projection, leaves the projections where
    quantization and weight packing find them.)"""

    def __init__(self, block: nn.Module, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        self.block = block
        self.group = group

    def forward(self, *args: object) -> torch.Tensor:
        out = self.block(*args)
        dist.all_reduce(out, group=self.group)
        return out


class VocabParallelEmbedding(nn.Module):
    """Rows [start, start + n) of the embedding: ids outside are looked up as zeros; the all-reduce adds the
    one rank that holds each id to zeros, so the result is exactly the full lookup."""

    def __init__(self, weight: torch.Tensor, start: int, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.start = start
        self.group = group

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        outside = (local < 0) | (local >= self.weight.shape[0])
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out = out.masked_fill(outside.unsqueeze(-1), 0)
        dist.all_reduce(out, group=self.group)
        return out


class VocabParallelHead(nn.Module):
    """Rows of the LM head for this rank's vocabulary slice; the slices' logits are all-gathered in order."""

    def __init__(self, weight: torch.Tensor, world_size: int, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.world_size = world_size
        self.group = group

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        local = F.linear(hidden, self.weight).contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(parts, local, group=self.group)
        return torch.cat(parts, dim=-1)
