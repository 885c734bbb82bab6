"""The capacity arithmetic: parameter counts, weight and KV bytes per device, KV blocks, decode-step bounds.

The KV budget formula (KV bytes per token, the activation floor, the bytes left for the cache, blocks) is
`switchyard.kv_budget`, the one the engine sizes its cache with, so a plan and the budget a real
`switchyard serve` computes agree. Torch-free: dtypes are names.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from switchyard.kv_budget import (
    DEFAULT_MEMORY_UTILIZATION_GPU,
    activation_floor_bytes,
    blocks_for,
    element_bytes,
    kv_blocks,
    kv_budget_bytes,
    kv_bytes_per_token,
    usable_bytes,
)
from switchyard.models.config import ModelArchConfig
from switchyard.models.quantization.int4_split import check_int4_split
from switchyard.plan.devices import DeviceSpec

DTYPES = ("float32", "bfloat16", "float16", "fp8")
"""Weight dtypes a checkpoint's `torch_dtype` may name for 'auto' to keep."""
QUANTIZED_WEIGHT_BYTES: dict[str, float] = {"int8": 1.0, "fp8": 1.0, "int4": 0.5}
"""Bytes per decoder-layer projection weight under weight-only quantization (scales not counted, ~1-3%)."""


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by how they are stored: quantization applies to `linear` only, as GPTQ/AWQ/FP8 checkpoints do."""

    embedding: int
    lm_head: int
    """0 when the LM head is tied to the embedding."""
    linear: int
    """Projection weights of the decoder layers (q, k, v, o, gate, up, down; every expert's too)."""
    kv_linear: int
    """The k and v projections within `linear`: with fewer KV heads than tensor-parallel ranks they are
    replicated, not split, so they count per device apart from the rest."""
    other: int
    """Biases, norms and routers, kept in the model dtype."""
    experts: int = 0
    """The routed experts' weights within `linear` (mixture-of-experts models; 0 for dense ones)."""
    active_experts: int = 0
    """Of those, what one token uses: its top-k experts in every sparse layer."""

    @property
    def total(self) -> int:
        """Parameters held in memory."""
        return self.embedding + self.lm_head + self.linear + self.other

    @property
    def active(self) -> int:
        """Parameters one token's forward pass uses: all of a dense model, a mixture's top-k experts only."""
        return self.total - self.experts + self.active_experts


def count_parameters(config: ModelArchConfig) -> ParamCounts:
    hidden, q, kv = config.hidden_size, config.q_size, config.kv_size
    attention = hidden * q + 2 * hidden * kv + q * hidden
    moe = config.moe
    sparse = len(moe.sparse_layers) if moe is not None else 0
    dense = config.num_hidden_layers - sparse
    linear = config.num_hidden_layers * attention + dense * 3 * hidden * config.intermediate_size
    per_layer_other = 2 * hidden  # input and post-attention RMSNorm
    if config.attention_bias:
        per_layer_other += q + 2 * kv
    if config.qk_norm:
        per_layer_other += 2 * config.head_dim
    other = config.num_hidden_layers * per_layer_other + hidden  # + the final norm
    experts = active_experts = 0
    if moe is not None and sparse:
        per_expert = 3 * hidden * moe.expert_intermediate_size
        experts = sparse * moe.num_experts * per_expert
        active_experts = sparse * moe.top_k * per_expert
        linear += experts + sparse * 3 * hidden * moe.shared_expert_intermediate_size
        other += sparse * (moe.num_experts * hidden + (hidden if moe.has_shared_expert else 0))  # routers
    embedding = config.vocab_size * hidden
    return ParamCounts(
        embedding=embedding,
        lm_head=0 if config.tie_word_embeddings else embedding,
        linear=linear,
        kv_linear=config.num_hidden_layers * 2 * hidden * kv,
        other=other,
        experts=experts,
        active_experts=active_experts,
    )


def expected_experts_read(num_experts: int, top_k: int, batch: int) -> float:
    """Experts of one layer a decode step of `batch` tokens reads, expected under uniform routing: each expert
    is missed by one token with probability 1 - k/E, so by all of them with (1 - k/E)^batch."""
    return num_experts * (1 - (1 - top_k / num_experts) ** batch)


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan depends on, validated by the CLI before it gets here."""

    config: ModelArchConfig
    model_name: str
    device: DeviceSpec
    dtype: str = "bfloat16"
    kv_dtype: str = "auto"
    """'auto' = the model dtype."""
    quantization: str = "none"
    int4_group_size: int = 128
    """int4's group along the input (the checkpoint's, or `--quantization int4`'s 128): with tensor
    parallelism each rank's share of o_proj's and down_proj's inputs must be whole groups, as the engine checks."""
    max_model_len: int | None = None
    """None = the model's max_position_embeddings."""
    tensor_parallel: int = 1
    block_size: int = 16
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION_GPU
    max_num_batched_tokens: int = 4096
    """Token budget per step; sizes the activation reserve."""
    max_num_seqs: int = 256
    """The engine's cap on sequences running at once (`--max-num-seqs`), whatever the KV cache would hold; the
    default is EngineConfig's (tested), not imported, as that would load torch."""
    seq_lens: tuple[int, ...] = (1024, 4096)
    batch_sizes: tuple[int, ...] = (1, 8, 32, 128)
    context_len: int | None = None
    """Tokens each sequence holds in the decode-bound table; None = max_model_len // 2."""
    draft_config: ModelArchConfig | None = None
    """A speculative draft model (`--speculative-model`): its weights (in dtype, unquantized, whole on every
    device) and its KV cache, one draft block per target block as the engine allocates them, share the memory."""
    speculator_parameters: int = 0
    """A speculator's parameters (`--speculative-model` naming one): weights beside the target's, no KV cache."""


@dataclass(frozen=True)
class DecodeBound:
    batch_size: int
    context_len: int
    bytes_per_step: int
    """What one decode step reads (per device): the weights, every sequence's KV cache, and of an untied
    input embedding only the batch's rows (a tied one is the LM head, read whole)."""
    step_seconds: float | None
    tokens_per_s: float | None
    fits: bool
    """Whether this many sequences of context_len fit in the KV cache."""


@dataclass(frozen=True)
class CapacityPlan:
    inputs: PlanInputs
    params: ParamCounts
    weights_bytes_per_device: int
    kv_bytes_per_token_per_device: int
    kv_heads_per_device: int
    usable_bytes: int
    """memory × utilization on a GPU (weights included); on a CPU (memory − weights) × utilization, the
    engine's budget there being a fraction of the RAM available once the weights are loaded."""
    activation_bytes: int
    kv_budget_bytes: int
    num_blocks: int
    max_model_len: int
    dtype: str
    """The weights' dtype once 'auto' is resolved."""
    kv_dtype: str
    draft_weights_bytes: int
    draft_kv_bytes_per_token: int
    """Both 0 without a draft model."""
    concurrency: dict[int, int]
    """Sequence length → sequences whose KV fits at once (whole blocks each); the engine runs at most
    `inputs.max_num_seqs` of them (`running`)."""
    decode: list[DecodeBound] = field(default_factory=list)

    def running(self, length: int) -> int:
        """Sequences of `length` the engine runs at once: what the KV cache holds, capped by max_num_seqs."""
        return min(self.concurrency[length], self.inputs.max_num_seqs)

    @property
    def fits(self) -> bool:
        """At least one max_model_len sequence fits beside the weights."""
        return self.num_blocks >= blocks_for(self.max_model_len, self.inputs.block_size)

    @property
    def kv_cache_tokens(self) -> int:
        return self.num_blocks * self.inputs.block_size

    def to_dict(self) -> dict[str, Any]:
        inputs = dataclasses.asdict(self.inputs)
        inputs["config"] = self.inputs.config.architecture
        inputs["draft_config"] = self.inputs.draft_config.architecture if self.inputs.draft_config else None
        return {
            "inputs": inputs,
            "params": {
                **dataclasses.asdict(self.params),
                "total": self.params.total,
                "active": self.params.active,
            },
            "weights_bytes_per_device": self.weights_bytes_per_device,
            "kv_bytes_per_token_per_device": self.kv_bytes_per_token_per_device,
            "kv_heads_per_device": self.kv_heads_per_device,
            "usable_bytes": self.usable_bytes,
            "activation_bytes": self.activation_bytes,
            "kv_budget_bytes": self.kv_budget_bytes,
            "num_blocks": self.num_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_model_len": self.max_model_len,
            "dtype": self.dtype,
            "kv_dtype": self.kv_dtype,
            "draft_weights_bytes": self.draft_weights_bytes,
            "draft_kv_bytes_per_token": self.draft_kv_bytes_per_token,
            "fits": self.fits,
            "max_concurrent_seqs": {str(k): v for k, v in self.concurrency.items()},
            "max_num_seqs": self.inputs.max_num_seqs,
            "max_running_seqs": {str(k): self.running(k) for k in self.concurrency},
            "decode_bounds": [dataclasses.asdict(d) for d in self.decode],
        }


def resolve_dtype(name: str, config: ModelArchConfig) -> str:
    """'auto' -> the checkpoint's dtype, bfloat16 when it names none we know."""
    if name == "auto":
        return config.torch_dtype if config.torch_dtype in DTYPES else "bfloat16"
    return name


def check_tensor_parallel(config: ModelArchConfig, tensor_parallel: int) -> None:
    """Raise ValueError unless the heads split across `tensor_parallel` ranks as vLLM splits them: attention
    heads evenly, KV heads evenly or (fewer KV heads than ranks) each replicated on tp / kv_heads ranks."""
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if heads % tensor_parallel:
        raise ValueError(
            f"tensor parallel size {tensor_parallel} does not divide the {heads} attention heads"
        )
    if kv_heads >= tensor_parallel and kv_heads % tensor_parallel:
        raise ValueError(f"tensor parallel size {tensor_parallel} does not divide the {kv_heads} KV heads")
    if kv_heads < tensor_parallel and tensor_parallel % kv_heads:
        raise ValueError(
            f"tensor parallel size {tensor_parallel} is not a multiple of the {kv_heads} KV heads, "
            "so they cannot be replicated evenly across the ranks"
        )
    moe = config.moe
    if moe is not None and moe.sparse_layers:  # each expert's inner width is split, as a dense MLP's
        for name, width in (
            ("expert", moe.expert_intermediate_size),
            ("shared expert", moe.shared_expert_intermediate_size),
        ):
            if width % tensor_parallel:
                raise ValueError(
                    f"tensor parallel size {tensor_parallel} does not divide the {name} width {width}"
                )


def kv_head_replicas(config: ModelArchConfig, tensor_parallel: int) -> int:
    """Ranks holding a copy of each KV head: tp / kv_heads when there are fewer KV heads than ranks, else 1."""
    return max(1, tensor_parallel // config.num_key_value_heads)


def weights_bytes(
    params: ParamCounts, dtype: str, quantization: str, tensor_parallel: int, kv_replicas: int = 1
) -> int:
    """Bytes of weights one device holds: projections and the (vocab-parallel) embedding and LM head split
    across tensor-parallel ranks, the k/v projections of a replicated KV head copied `kv_replicas` times,
    norms replicated."""
    element = element_bytes(dtype)
    linear = params.linear + (kv_replicas - 1) * params.kv_linear
    linear_bytes = linear * QUANTIZED_WEIGHT_BYTES.get(quantization, element)
    sharded = linear_bytes + (params.embedding + params.lm_head) * element
    return math.ceil(sharded / tensor_parallel) + params.other * element


def make_plan(inputs: PlanInputs) -> CapacityPlan:
    """The plan for `inputs`; raises ValueError when the model cannot be split across the ranks."""
    config, tp = inputs.config, inputs.tensor_parallel
    check_tensor_parallel(config, tp)
    if inputs.quantization == "int4":
        check_int4_split(config, tp, inputs.int4_group_size)
    dtype_name = resolve_dtype(inputs.dtype, config)
    kv_dtype_name = dtype_name if inputs.kv_dtype == "auto" else inputs.kv_dtype
    kv_element = element_bytes(kv_dtype_name)  # the engine's `--kv-cache-dtype` names
    max_model_len = inputs.max_model_len or config.max_position_embeddings
    params = count_parameters(config)
    # Fewer KV heads than ranks: each rank keeps a replica of one head (and its projections), as vLLM does.
    weights = weights_bytes(params, dtype_name, inputs.quantization, tp, kv_head_replicas(config, tp))
    kv_heads = max(1, config.num_key_value_heads // tp)
    per_token = kv_bytes_per_token(dataclasses.replace(config, num_key_value_heads=kv_heads), kv_element)
    draft_weights = draft_per_token = 0
    if inputs.draft_config is not None:
        draft_weights = weights_bytes(count_parameters(inputs.draft_config), dtype_name, "none", 1)
        draft_per_token = kv_bytes_per_token(inputs.draft_config, kv_element)
    elif inputs.speculator_parameters:
        # Unquantized and whole on every device, as a draft's: counted as "other" parameters in dtype.
        draft_weights = weights_bytes(
            ParamCounts(0, 0, 0, 0, inputs.speculator_parameters), dtype_name, "none", 1
        )
    element = element_bytes(dtype_name)
    activation = activation_floor_bytes(config, inputs.max_num_batched_tokens, element)
    total = None if inputs.device.is_cpu else inputs.device.memory_bytes
    # Free memory as the engine measures it: with the weights (and a draft's) already loaded.
    available = inputs.device.memory_bytes - weights - draft_weights
    fraction = inputs.memory_utilization
    usable = usable_bytes(available_bytes=available, utilization=fraction, device_total_bytes=total)
    kv_budget = kv_budget_bytes(
        available_bytes=available, activation_bytes=activation, utilization=fraction, device_total_bytes=total
    )
    num_blocks = kv_blocks(kv_budget, per_token + draft_per_token, inputs.block_size)
    concurrency = {
        length: num_blocks // blocks_for(length, inputs.block_size)
        for length in (*inputs.seq_lens, max_model_len)
    }
    context = inputs.context_len or max(1, max_model_len // 2)
    bandwidth = inputs.device.bandwidth_bytes_per_s
    # An untied embedding is a lookup, not a product: a step reads one row per sequence, not the table.
    unread_embedding = math.ceil(params.embedding * element / tp) if params.lm_head else 0
    expert_bytes = math.ceil(params.experts * QUANTIZED_WEIGHT_BYTES.get(inputs.quantization, element) / tp)
    decode = []
    for batch in inputs.batch_sizes:
        embedding_rows = batch * config.hidden_size * element if params.lm_head else 0
        # A mixture reads only the experts the batch's tokens were routed to.
        unread_experts = 0
        if config.moe is not None and params.experts:
            read = expected_experts_read(config.moe.num_experts, config.moe.top_k, batch)
            unread_experts = math.floor(expert_bytes * (1 - read / config.moe.num_experts))
        step_bytes = (
            weights - unread_embedding - unread_experts + embedding_rows + batch * context * per_token
        )
        seconds = step_bytes / bandwidth if bandwidth else None
        decode.append(
            DecodeBound(
                batch_size=batch,
                context_len=context,
                bytes_per_step=step_bytes,
                step_seconds=seconds,
                tokens_per_s=batch / seconds if seconds else None,
                fits=batch * blocks_for(context, inputs.block_size) <= num_blocks,
            )
        )
    return CapacityPlan(
        inputs=inputs,
        params=params,
        weights_bytes_per_device=weights,
        kv_bytes_per_token_per_device=per_token,
        kv_heads_per_device=kv_heads,
        usable_bytes=usable,
        activation_bytes=activation,
        kv_budget_bytes=kv_budget,
        num_blocks=int(num_blocks),
        max_model_len=max_model_len,
        dtype=dtype_name,
        kv_dtype=kv_dtype_name,
        draft_weights_bytes=draft_weights,
        draft_kv_bytes_per_token=draft_per_token,
        concurrency=concurrency,
        decode=decode,
    )
