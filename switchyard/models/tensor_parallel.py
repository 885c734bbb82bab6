"""Tensor parallelism of the Llama family: one rank's shard of a loaded model, and the layers that join shards.

Megatron's split, which needs one all-reduce per half-layer: q/k/v and gate/up are split by output (each rank
computes its own heads and its own slice of the MLP), o and down by input (each rank's product is a partial sum,
all-reduced). The embedding and the LM head are split by vocabulary: a rank looks up only the ids in its range
(zeros elsewhere, all-reduced: exact) and computes its slice of the logits (all-gathered). KV heads are split
with the query heads that read them; with fewer KV heads than ranks, each rank keeps the one KV head its query
heads share (replicated, as `switchyard plan` counts it).

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
from switchyard.models.llama import LlamaForCausalLM
from switchyard.models.quantization.int4_formats import CHECKPOINT_GRID, Int4Grid
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


def rank_slices(config: ModelArchConfig, rank: int, world_size: int) -> RankSlices:
    if world_size > 1 and config.moe is not None and config.moe.sparse_layers:
        raise TensorParallelConfigError(
            f"{config.architecture} is a mixture of experts, which --tensor-parallel-size does not split yet "
            "(nor is expert parallelism implemented); serve it on one device"
        )
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    checks = (
        ("num_attention_heads", heads),
        ("intermediate_size", config.intermediate_size),
        ("vocab_size", config.vocab_size),
    )
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
    intermediate = config.intermediate_size // world_size
    vocab = config.vocab_size // world_size
    return RankSlices(
        rank=rank,
        world_size=world_size,
        q_heads=(rank * q_per_rank, (rank + 1) * q_per_rank),
        kv_heads=kv_range,
        intermediate=(rank * intermediate, (rank + 1) * intermediate),
        vocab=(rank * vocab, (rank + 1) * vocab),
    )


def local_config(config: ModelArchConfig, slices: RankSlices) -> ModelArchConfig:
    """The shape of one rank's shard (vocabulary size unchanged: the embedding and head are replaced)."""
    return dataclasses.replace(
        config,
        num_attention_heads=slices.q_heads[1] - slices.q_heads[0],
        num_key_value_heads=slices.kv_heads[1] - slices.kv_heads[0],
        intermediate_size=slices.intermediate[1] - slices.intermediate[0],
    )


@torch.no_grad()
def shard_model(
    full: LlamaForCausalLM, rank: int, world_size: int, group: dist.ProcessGroup | None = None
) -> LlamaForCausalLM:
    """Rank `rank`'s shard of a loaded model, with the collectives that join the shards (`group`)."""
    config = full.config
    slices = rank_slices(config, rank, world_size)
    shard_config = local_config(config, slices)
    device = full.lm_head.weight.device
    with torch.device("meta"):
        shard = LlamaForCausalLM(shard_config)
    shard.rotary = full.rotary
    hd = config.head_dim
    q_rows = _rows(slices.q_heads, hd)
    k_rows = _rows(slices.kv_heads, hd, offset=config.q_size)
    v_rows = _rows(slices.kv_heads, hd, offset=config.q_size + config.kv_size)
    qkv_rows = torch.cat([q_rows, k_rows, v_rows]).to(device)
    inter = torch.arange(*slices.intermediate, device=device)
    gate_up_rows = torch.cat([inter, inter + config.intermediate_size])
    q_cols = (slices.q_heads[0] * hd, slices.q_heads[1] * hd)
    for index, (full_layer, layer) in enumerate(zip(full.model.layers, shard.model.layers, strict=True)):
        attention, mlp = full_layer.self_attn, full_layer.mlp
        where = _ShardSite(f"model.layers.{index}", world_size)
        layer.self_attn.qkv_proj = _linear(attention.qkv_proj, where.at("self_attn.qkv_proj"), rows=qkv_rows)
        layer.self_attn.o_proj = _linear(attention.o_proj, where.at("self_attn.o_proj"), cols=q_cols)
        layer.self_attn.q_norm, layer.self_attn.k_norm = attention.q_norm, attention.k_norm
        layer.self_attn = AllReducedOutput(layer.self_attn, group)
        layer.mlp.gate_up_proj = _linear(mlp.gate_up_proj, where.at("mlp.gate_up_proj"), rows=gate_up_rows)
        layer.mlp.down_proj = _linear(mlp.down_proj, where.at("mlp.down_proj"), cols=slices.intermediate)
        layer.mlp = AllReducedOutput(layer.mlp, group)
        layer.input_layernorm = full_layer.input_layernorm
        layer.post_attention_layernorm = full_layer.post_attention_layernorm
    start, end = slices.vocab
    shard.model.embed_tokens = VocabParallelEmbedding(
        full.model.embed_tokens.weight[start:end].clone(), start, group
    )
    shard.model.norm = full.model.norm
    shard.lm_head = VocabParallelHead(full.lm_head.weight[start:end].clone(), world_size, group)
    return shard.eval()


def _rows(heads: tuple[int, int], head_dim: int, offset: int = 0) -> torch.Tensor:
    return torch.arange(offset + heads[0] * head_dim, offset + heads[1] * head_dim)


@dataclasses.dataclass(frozen=True)
class _ShardSite:
    """Which projection is being split, over how many ranks: for the error that names it."""

    name: str
    world_size: int

    def at(self, projection: str) -> _ShardSite:
        return _ShardSite(f"{self.name}.{projection}", self.world_size)


def _linear(
    full: nn.Linear, site: _ShardSite, rows: torch.Tensor | None = None, cols: tuple[int, int] | None = None
) -> nn.Linear:
    """Output rows `rows` and input columns [cols) of `full`; a pre-quantized int4 layer's checkpoint grid is
    sliced alike, so the shard is rebuilt from its own codes (fused q/k/v and gate/up rows are picked per part,
    as the weight's are)."""
    weight = full.weight
    if rows is not None:
        weight = weight.index_select(0, rows)
    if cols is not None:
        weight = weight[:, cols[0] : cols[1]]
    bias = full.bias
    if bias is not None and rows is not None:
        bias = bias.index_select(0, rows)
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    linear.weight = nn.Parameter(weight.contiguous(), requires_grad=False)
    if bias is not None:
        linear.bias = nn.Parameter(bias.contiguous(), requires_grad=False)
    grid: Int4Grid | None = getattr(full, CHECKPOINT_GRID, None)
    if grid is not None:
        setattr(linear, CHECKPOINT_GRID, _shard_grid(grid, site, rows, cols))
    return linear


def _shard_grid(
    grid: Int4Grid, site: _ShardSite, rows: torch.Tensor | None, cols: tuple[int, int] | None
) -> Int4Grid:
    if rows is not None:
        grid = grid.rows(rows)
    if cols is not None:
        start, end = cols
        try:
            grid = grid.columns(start, end - start)
        except ValueError:
            raise Int4SplitError(
                int4_split_message(site.name, end - start, grid.group_size, site.world_size)
            ) from None
    return grid


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
