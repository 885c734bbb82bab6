"""Engine configuration, read and validated once at the edge (CLI, LLM constructor, server start)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from switchyard.engine.scheduler import SchedulerConfig
from switchyard.models.attention_backend import ATTENTION_BACKENDS
from switchyard.models.kv_cache_dtype import KV_CACHE_DTYPES
from switchyard.models.quantization.methods import QUANTIZATION_METHODS

KV_FULL_POLICIES = ("queue", "preempt", "reject")


@dataclass(frozen=True)
class EngineConfig:
    model: str = "switchyard-chat"
    """A Hugging Face model folder, or a bundled model name until `engine_args.resolve_model_folders` (called
    by `LLM` and the CLI) turns it into its folder: the engine loads folders only."""
    tokenizer: str | None = None
    """Tokenizer folder when it differs from the model folder."""
    chat_template: str | None = None
    """A Jinja chat template, or a file holding one, used instead of the tokenizer's (for models without one,
    or to change how conversations and tools are rendered)."""
    dtype: str = "auto"
    """float32, bfloat16, float16, or auto: the checkpoint's dtype, widened to float32 on a CPU without native
    bf16 (`models.cpu_bf16`)."""
    kv_cache_dtype: str = "auto"
    """Storage dtype of KV cache entries: auto (the model's), float32, bfloat16, float16, fp8 (= fp8_e4m3) or
    fp8_e5m2 (`models.kv_cache_dtype`). Narrower entries fit more sequences and read faster in decode."""
    quantization: str | None = None
    """int8, w8a8 or int4 (`models.quantization`): the decoder's projections quantized at load; None keeps the
    checkpoint's own (a compressed-tensors int8 or w8a8 checkpoint) or none."""
    device: str = "auto"
    """cpu, cuda, cuda:N, or auto (cuda when present)."""
    tensor_parallel_size: int = 1
    """Ranks the model is split over (`engine.parallel`): worker processes beside this one, gloo on CPU, NCCL
    on CUDA (one GPU per rank, counted from `device`)."""
    attention_backend: str = "auto"
    """sdpa (gather blocks, PyTorch attention: everywhere), triton (paged kernel reading block tables in place:
    CUDA) or auto (triton on CUDA when installed, else sdpa): `models.attention_backend`."""
    enforce_eager: bool = False
    """On CUDA with the triton backend, decode steps replay captured CUDA graphs (`engine.cuda_graphs`); True
    runs every step eagerly."""
    block_size: int = 16
    max_model_len: int | None = None
    """Context length served; defaults to the model's max_position_embeddings (which it may exceed with
    `sliding_window` or a dynamic NTK rope)."""
    sliding_window: int | None = None
    """Serve a model without a window with one: each token attends to the last this many, and the KV blocks
    that leave the window are released, so memory per sequence stops growing (`docs/long_context.md`)."""
    attention_sinks: int = 0
    """With `sliding_window`: also keep the first this many tokens, attended at their cache positions
    (StreamingLLM), which keeps perplexity stable as the window slides."""
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    """Token budget of one step; defaults to 512 on CPU and 4096 on CUDA."""
    kv_cache_memory: int | None = None
    """KV cache size in bytes; overrides memory_utilization."""
    memory_utilization: float | None = None
    """Fraction of device memory (on CPU: of the RAM available at start) that weights, activations and KV
    cache may use; defaults to 0.9 on CUDA and 0.5 on CPU."""
    kv_full_policy: str = "queue"
    """What a request meets when the KV cache is full: 'queue' (wait), 'preempt' (strictly more urgent
    requests preempt less urgent running ones) or 'reject' (CapacityError, HTTP 429)."""
    tenant_weights: dict[str, float] = field(default_factory=dict)
    """Weighted fair share between tenants within a priority level; unlisted tenants weigh 1."""
    max_queue_time: float | None = None
    """Seconds a request may wait before it is first scheduled; past that it fails (queue timeout)."""
    pack_weights: bool = True
    """On CPU, pre-pack projection weights into oneDNN's layout (faster matmuls; a tied LM head gets a copy)."""
    enable_prefix_caching: bool = True
    """Reuse the KV blocks of shared prompt prefixes across requests."""
    structured_outputs_backend: str = "auto"
    """Grammar library for structured outputs: auto (each spec to the library that enforces it exactly),
    xgrammar, or llguidance."""
    speculative_method: str | None = None
    """Speculative decoding: None (off), "ngram" (prompt lookup), "draft" (a small draft model) or "speculator"
    (look-ahead heads on the model's hidden state)."""
    speculative_model: str | None = None
    """Draft model or speculator folder, or bundled name, for "draft" and "speculator" (default with the
    bundled model: its draft, or its speculator); resolved to a folder with `model`."""
    num_speculative_tokens: int = 4
    spec_max_batch_size: int = 8
    """No speculation in steps with more running sequences than this (it stops paying)."""
    spec_adaptive: bool = False
    """Draft and speculator methods: measure while serving whether speculation is faster at each batch size, and
    speculate only there."""
    spec_ngram_min: int = 2
    spec_ngram_max: int = 4
    """Prompt lookup (ngram method, and the speculator's fallback): the shortest and longest suffix n-gram
    looked up in the sequence's history (vLLM's prompt_lookup_min / prompt_lookup_max)."""
    spec_lookup_below: float = 0.6
    """Speculator method: prompt lookup proposes instead where the speculator's first guess has less probability
    than this (0: never; `SpecDecodeConfig.lookup_below`)."""
    spec_mask_drafts: bool = True
    """Draft and speculator methods: sample each drafted token under the request's grammar mask, so a draft
    never proposes what the grammar forbids (off only to measure what the mask is worth:
    `benchmarks/spec_decode.py`)."""
    seed: int = 0
    """Seed of the random stream shared by requests that bring no seed of their own."""
    skip_tokenizer: bool = False

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError("block_size must be a power of two")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError("max_model_len must be >= 1")
        if self.memory_utilization is not None and not 0 < self.memory_utilization <= 1:
            raise ValueError("memory_utilization must be in (0, 1]")
        if self.kv_cache_memory is not None and self.kv_cache_memory <= 0:
            raise ValueError("kv_cache_memory must be > 0 bytes")
        if self.max_queue_time is not None and self.max_queue_time <= 0:
            raise ValueError("max_queue_time must be > 0 seconds")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}")
        if self.quantization is not None and self.quantization not in QUANTIZATION_METHODS:
            raise ValueError(f"quantization must be one of {', '.join(QUANTIZATION_METHODS)}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}")
        if self.tensor_parallel_size < 1:
            raise ValueError("tensor_parallel_size must be >= 1")
        if self.kv_full_policy not in KV_FULL_POLICIES:
            raise ValueError(f"kv_full_policy must be one of {', '.join(KV_FULL_POLICIES)}")
        if any(w <= 0 for w in self.tenant_weights.values()):
            raise ValueError("tenant weights must be > 0")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError("sliding_window must be >= 1 token")
        if self.attention_sinks < 0:
            raise ValueError("attention_sinks must be >= 0")
        if self.attention_sinks and self.sliding_window is None:
            raise ValueError("attention_sinks needs sliding_window (the recent tokens kept beside the sinks)")
        if self.attention_sinks and self.speculative_method is not None:
            raise ValueError(
                f"speculative decoding ({self.speculative_method}) is not supported with attention sinks: "
                "verification attends several positions per sequence, which the sinks' per-query rotation "
                "does not batch; serve with one or the other"
            )
        if self.sliding_window is not None and self.tensor_parallel_size > 1:
            raise ValueError(
                "--sliding-window / --attention-sinks are not supported with --tensor-parallel-size > 1 yet: "
                "the other ranks load the checkpoint's own attention; serve on one device"
            )

    def resolved_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        device = torch.device(self.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda requested but CUDA is not available")
        return device

    def scheduler_config(self, device: torch.device) -> SchedulerConfig:
        budget = self.max_num_batched_tokens or (4096 if device.type == "cuda" else 512)
        return SchedulerConfig(
            max_num_batched_tokens=max(budget, self.max_num_seqs),
            max_num_seqs=self.max_num_seqs,
            preempt_for_priority=self.kv_full_policy == "preempt",
        )
