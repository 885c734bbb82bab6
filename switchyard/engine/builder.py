"""Builds an engine's parts from an EngineConfig: model, dtype, tokenizer, speculative decoding, KV cache, and
the processors around the step loop.

Every weight (the model's, a draft model's or a speculator's) is loaded before one forward pass is profiled
and the KV cache is sized from what memory is left, so the cache never takes memory a later load needs. The
engine receives model folders only: bundled model names are resolved at the config edge
(`engine_args.resolve_model_folders`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from switchyard.config import EngineConfig
from switchyard.engine.block_manager import BlockManager
from switchyard.engine.cuda_graphs import decode_graph_sizes
from switchyard.engine.input_processor import InputLimits, InputProcessor
from switchyard.engine.memory import (
    KVCacheBudget,
    analytic_activation_bytes,
    available_bytes,
    model_bytes,
    peak_rss_bytes,
    plan_budget,
)
from switchyard.engine.model_runner import ModelRunner
from switchyard.engine.output_processor import OutputProcessor
from switchyard.engine.parallel.group import RankModelSpec, TensorParallelGroup
from switchyard.engine.parallel.rank_model import load_rank_model
from switchyard.engine.parallel.runner import TensorParallelRunner
from switchyard.engine.policy import PriorityFairPolicy, SchedulingPolicy
from switchyard.engine.sampler import Sampler
from switchyard.engine.scheduler import Scheduler, SchedulerConfig
from switchyard.engine.spec.decoder import SpecDecodeConfig, SpecDecoder
from switchyard.engine.spec.draft import DraftModelProposer
from switchyard.engine.spec.governor import SpeculationGovernor
from switchyard.engine.spec.ngram import NgramProposer
from switchyard.engine.spec.speculator import SpeculatorProposer
from switchyard.engine.spec.step import SpeculativeStep
from switchyard.engine.structured.admission import GrammarAdmission
from switchyard.errors import ModelLoadError
from switchyard.models.attention_backend import resolve_attention_backend
from switchyard.models.config import ModelArchConfig, with_long_context
from switchyard.models.cpu_bf16 import auto_dtype, cpu_has_native_bf16
from switchyard.models.kv_cache_dtype import resolve_kv_cache_dtype
from switchyard.models.llama import LlamaForCausalLM
from switchyard.models.loader import load_model, parse_dtype
from switchyard.models.packed_linear import can_pack, dual_layout_bytes, pack_linear_layers
from switchyard.models.quantization.apply import quantized_buffer_bytes
from switchyard.models.quantization.checkpoint import checkpoint_quantization
from switchyard.models.quantization.int4_split import check_int4_split
from switchyard.models.quantization.methods import QuantizationSpec
from switchyard.models.speculator import Speculator, is_speculator_folder, load_speculator
from switchyard.models.tensor_parallel import rank_slices
from switchyard.models.tokenizer import (
    GenerationDefaults,
    eos_token_ids,
    load_chat_template,
    load_generation_defaults,
    load_tokenizer,
)
from switchyard.quant_gates import read_gate

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


@dataclass
class EngineParts:
    """What an engine is built from, fixed for its lifetime (unlike `SchedulingState`)."""

    model_path: Path
    model_config: ModelArchConfig
    device: torch.device
    dtype: torch.dtype
    kv_dtype: torch.dtype
    """Storage dtype of KV cache entries (may be narrower than `dtype`)."""
    quantization: str | None
    """The decoder projections' quantization method (int8, w8a8, int4), or None."""
    max_model_len: int
    tokenizer: PreTrainedTokenizerBase | None
    eos_token_ids: tuple[int, ...]
    generation_defaults: GenerationDefaults
    model: LlamaForCausalLM
    scheduler_config: SchedulerConfig
    kv_budget: KVCacheBudget
    sampler: Sampler
    """The sampler with the shared random stream (requests without a seed of their own draw from it)."""
    spec_decoder: SpecDecoder | None
    speculation: SpeculativeStep | None
    """The speculative phases of a step (with the governor, for adaptive speculation)."""
    inputs: InputProcessor
    outputs: OutputProcessor
    grammars: GrammarAdmission
    make_runner: Callable[..., ModelRunner] = ModelRunner
    """ModelRunner, or under tensor parallelism one that keeps the worker ranks in step."""
    tensor_parallel: TensorParallelGroup | None = None
    """The worker ranks (None: one rank); `LLMEngine.close` stops them."""


@dataclass
class SchedulingState:
    """The KV cache and the queues over it: built at start, and built fresh after a hung step (`recovery`)."""

    block_manager: BlockManager
    runner: ModelRunner
    scheduler: Scheduler
    policy: SchedulingPolicy


@dataclass
class _Speculation:
    """A speculative decoding configuration and the extra model it loaded (at most one of the two)."""

    config: SpecDecodeConfig
    draft_model: LlamaForCausalLM | None = None
    speculator: Speculator | None = None
    weights_bytes: int = 0


def model_folder(path: str) -> Path:
    """`path` as a model folder; ModelLoadError when it is not one (bundled names must be resolved first)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ModelLoadError(
            "no model folder here (bundled model names are resolved at the edge: "
            "switchyard.engine_args.resolve_model_folders)",
            path,
        )
    return folder


def build_engine_parts(config: EngineConfig) -> EngineParts:
    """Load the model (and draft or speculator), then size the KV cache from the memory that is left."""
    device = config.resolved_device()
    folder = model_folder(config.model)
    arch = with_long_context(
        ModelArchConfig.from_folder(folder), config.sliding_window, config.attention_sinks
    )
    dtype = _model_dtype(config, arch, device)
    kv_dtype = resolve_kv_cache_dtype(config.kv_cache_dtype, dtype)
    # Dynamic NTK rescales rotary positions past the trained context, and a window the user asked for keeps
    # every query-key distance within it: both may serve longer sequences; other models may not.
    extends = arch.rope.rope_type == "dynamic" or config.sliding_window is not None
    if config.max_model_len and config.max_model_len > arch.max_position_embeddings and not extends:
        raise ValueError(
            f"max_model_len {config.max_model_len} exceeds the model's max_position_embeddings "
            f"{arch.max_position_embeddings}"
        )
    max_model_len = config.max_model_len or arch.max_position_embeddings
    tokenizer = None
    if not config.skip_tokenizer:
        tokenizer = load_tokenizer(Path(config.tokenizer) if config.tokenizer else folder)
        if config.chat_template is not None:
            tokenizer.chat_template = load_chat_template(config.chat_template)
    generation = load_generation_defaults(folder)

    rss_before = peak_rss_bytes()
    quantization = _quantization(config, folder)
    pack = config.pack_weights and can_pack(device, dtype)
    tensor_parallel = None
    if config.tensor_parallel_size > 1:
        # a shape that does not split fails before any spawn
        rank_slices(arch, 0, config.tensor_parallel_size)
        if quantization is not None and quantization.method == "int4":
            check_int4_split(arch, config.tensor_parallel_size, quantization.group_size)
        if (
            device.type == "cuda"
            and torch.cuda.device_count() < (device.index or 0) + config.tensor_parallel_size
        ):
            raise ValueError(
                f"--tensor-parallel-size {config.tensor_parallel_size} needs that many GPUs from {device}; "
                f"{torch.cuda.device_count()} are visible"
            )
        if device.type == "cpu" and config.kv_cache_memory is None:
            # the ranks share this host's memory: each plans its cache from its share of it
            share = (config.memory_utilization or 0.5) / config.tensor_parallel_size
            config = dataclasses.replace(config, memory_utilization=share)
        tensor_parallel = TensorParallelGroup(
            RankModelSpec(
                folder=str(folder),
                dtype=dtype,
                device=str(device),
                max_model_len=max_model_len,
                quantization=config.quantization,
                pack=pack,
                world_size=config.tensor_parallel_size,
            )
        )
    try:
        model = load_rank_model(
            folder, dtype, device, max_model_len, config.quantization, 0, config.tensor_parallel_size, arch
        )
    except BaseException:
        if tensor_parallel is not None:
            tensor_parallel.close()
        raise
    # a pre-quantized checkpoint's quality is its publisher's call: the gate is for quantizing here
    if quantization is not None and not quantization.prequantized:
        _warn_without_gate(folder, quantization)
    weights = model_bytes(model) + quantized_buffer_bytes(model)
    scheduler_config = config.scheduler_config(device)
    if pack:
        pack_linear_layers(model, max_rows=scheduler_config.max_num_seqs)
        weights += dual_layout_bytes(model)
    make_runner = (
        _single_rank_runner(config, device, dtype, kv_dtype, scheduler_config.max_num_seqs)
        if tensor_parallel is None
        else functools.partial(TensorParallelRunner, group=tensor_parallel)
    )
    speculation = _load_speculation(config, arch, dtype, device, max_model_len, pack)
    kv_budget = _size_kv_cache(
        config,
        model,
        scheduler_config,
        dtype=dtype,
        kv_dtype=kv_dtype,
        device=device,
        max_model_len=max_model_len,
        weights=weights,
        rss_before=rss_before,
        speculation=speculation,
        make_runner=make_runner,
    )
    logger.info(
        "dtype %s, KV cache entries %s; KV cache budget: %s",
        str(dtype).removeprefix("torch."),
        str(kv_dtype).removeprefix("torch."),
        kv_budget.describe(),
    )
    sampler = Sampler(generator=torch.Generator(device="cpu").manual_seed(config.seed))
    spec_decoder = None
    if speculation is not None:
        spec_decoder = _spec_decoder(
            speculation, arch, sampler, dtype, device, kv_dtype, kv_budget.num_blocks, config.block_size
        )
    step = None
    if spec_decoder is not None:
        governor = SpeculationGovernor() if spec_decoder.config.adaptive else None
        step = SpeculativeStep(spec_decoder, governor, scheduler_config.max_num_batched_tokens, max_model_len)
    eos = eos_token_ids(tokenizer, arch.eos_token_ids, generation)
    limits = InputLimits(
        vocab_size=arch.vocab_size,
        max_model_len=max_model_len,
        kv_cache_tokens=kv_budget.num_blocks * config.block_size,
        max_num_seqs=scheduler_config.max_num_seqs,
        window_tokens=_window_tokens(arch, config),
        prompts_kept=config.enable_prefix_caching,
        step_tokens=scheduler_config.max_num_batched_tokens,
    )
    grammars = GrammarAdmission(config.structured_outputs_backend, tokenizer, arch.vocab_size, eos)
    return EngineParts(
        model_path=folder,
        model_config=arch,
        device=device,
        dtype=dtype,
        kv_dtype=kv_dtype,
        quantization=quantization.method if quantization is not None else None,
        max_model_len=max_model_len,
        tokenizer=tokenizer,
        eos_token_ids=eos,
        generation_defaults=generation,
        model=model,
        scheduler_config=scheduler_config,
        kv_budget=kv_budget,
        sampler=sampler,
        spec_decoder=spec_decoder,
        speculation=step,
        inputs=InputProcessor(tokenizer, eos, limits, device, grammars),
        outputs=OutputProcessor(max_model_len, spec_decoder, grammars),
        grammars=grammars,
        make_runner=make_runner,
        tensor_parallel=tensor_parallel,
    )


def build_scheduling_state(
    config: EngineConfig, parts: EngineParts, policy: SchedulingPolicy | None = None
) -> SchedulingState:
    """An empty KV cache with its block manager, and a scheduler whose waiting queue is `policy` (default:
    priorities, then weighted fair share between the config's tenants)."""
    num_blocks = parts.kv_budget.num_blocks
    block_manager = BlockManager(
        num_blocks,
        config.block_size,
        enable_prefix_cache=config.enable_prefix_caching,
        window=parts.model.config.release_window,
        sinks=parts.model.config.attention_sinks,
    )
    runner = parts.make_runner(
        parts.model, num_blocks, config.block_size, parts.dtype, parts.device, parts.kv_dtype
    )
    runner.capture_decode_graphs()
    policy = policy if policy is not None else PriorityFairPolicy(config.tenant_weights)
    scheduler = Scheduler(parts.scheduler_config, block_manager, policy)
    return SchedulingState(block_manager, runner, scheduler, policy)


def _single_rank_runner(
    config: EngineConfig, device: torch.device, dtype: torch.dtype, kv_dtype: torch.dtype, max_num_seqs: int
) -> Callable[..., ModelRunner]:
    """ModelRunner with the attention backend resolved, and on CUDA with the Triton kernel (unless
    --enforce-eager) the decode batch sizes it captures as CUDA graphs. (Tensor parallel ranks stay on sdpa.)"""
    backend = resolve_attention_backend(config.attention_backend, device, dtype, kv_dtype, config.block_size)
    if backend == "triton" and config.attention_sinks:
        if config.attention_backend == "triton":
            raise ValueError(
                "--attention-backend triton does not attend with --attention-sinks: use sdpa or auto"
            )
        backend = "sdpa"  # auto: the sinks' attention runs on the SDPA path
    graphed = backend == "triton" and device.type == "cuda" and not config.enforce_eager
    sizes = decode_graph_sizes(max_num_seqs) if graphed else ()
    logger.info("attention backend %s; CUDA graphs at decode batch sizes %s", backend, list(sizes) or "off")
    return functools.partial(ModelRunner, attention_backend=backend, decode_graph_sizes=sizes)


def _quantization(config: EngineConfig, folder: Path) -> QuantizationSpec | None:
    """--quantization, else what the checkpoint is quantized as (int8 weights are loaded dequantized, then
    quantized again per channel: the same int8 values, since each row's largest weight maps to 127 both times;
    int4 layers are rebuilt from the checkpoint's own codes and grid)."""
    if config.quantization is not None:
        return QuantizationSpec(config.quantization)  # type: ignore[arg-type]
    return checkpoint_quantization(folder)


def _warn_without_gate(folder: Path, quantization: QuantizationSpec) -> None:
    verdict = read_gate(folder, quantization.method)
    if verdict is None:
        logger.warning(
            "%s quantization of %s has no quality-gate result: run `switchyard eval quant %s --quantization %s` "
            "before trusting its answers",
            quantization.method,
            folder,
            folder,
            quantization.method,
        )
    elif not verdict.get("passed", False):
        logger.warning(
            "%s quantization of %s FAILED its quality gate (%s); serving it anyway",
            quantization.method,
            folder,
            verdict.get("reason", "see `switchyard eval quant`"),
        )


def _window_tokens(arch: ModelArchConfig, config: EngineConfig) -> int | None:
    """What a windowed sequence holds besides its kept prompt and the chunk being computed: the sinks, the
    window, speculative drafts, and the partial blocks at the edges (`InputLimits.window_tokens`)."""
    if arch.release_window is None:
        return None
    drafts = config.num_speculative_tokens if config.speculative_method is not None else 0
    return arch.attention_sinks + arch.release_window + drafts + 3 * config.block_size


def _model_dtype(config: EngineConfig, arch: ModelArchConfig, device: torch.device) -> torch.dtype:
    if config.dtype == "auto":
        return parse_dtype(auto_dtype(arch.torch_dtype, device))
    dtype = parse_dtype(config.dtype)
    if device.type == "cpu" and dtype != torch.float32 and not cpu_has_native_bf16():
        logger.warning(
            "dtype %s on a CPU without native bf16/fp16 matrix products: every product is emulated "
            "(tens of times slower than float32; --dtype auto picks float32 here)",
            config.dtype,
        )
    return dtype


def _load_speculation(
    config: EngineConfig,
    arch: ModelArchConfig,
    dtype: torch.dtype,
    device: torch.device,
    max_model_len: int,
    pack: bool,
) -> _Speculation | None:
    """The speculative decoding config, with its draft model or speculator loaded (before the KV cache is
    sized: their weights, and a draft's cache, share the memory budget)."""
    if config.speculative_method is None:
        return None
    spec_config = SpecDecodeConfig(
        method=config.speculative_method,
        draft_model=config.speculative_model,
        num_speculative_tokens=config.num_speculative_tokens,
        max_batch_size=config.spec_max_batch_size,
        adaptive=config.spec_adaptive,
        mask_drafts=config.spec_mask_drafts,
        lookup_below=config.spec_lookup_below,
        ngram_min=config.spec_ngram_min,
        ngram_max=config.spec_ngram_max,
    )
    speculation = _Speculation(spec_config)
    if spec_config.method == "draft":
        assert spec_config.draft_model is not None
        folder = model_folder(spec_config.draft_model)
        if is_speculator_folder(folder):
            raise ModelLoadError(
                "this is a speculator, not a draft model: use --speculative-method speculator",
                spec_config.draft_model,
            )
        speculation.draft_model = load_model(folder, dtype, device, max_positions=max_model_len)
        speculation.weights_bytes = model_bytes(speculation.draft_model)
        if pack:
            pack_linear_layers(
                speculation.draft_model
            )  # the draft's steps are as memory-bound as the target's
            speculation.weights_bytes += dual_layout_bytes(speculation.draft_model)
    elif spec_config.method == "speculator":
        assert spec_config.draft_model is not None
        speculator = load_speculator(model_folder(spec_config.draft_model), dtype, device)
        if speculator.config.hidden_size != arch.hidden_size:
            raise ModelLoadError(
                f"the speculator reads hidden states of size {speculator.config.hidden_size}, but the "
                f"model's are {arch.hidden_size}: it was trained for another model",
                spec_config.draft_model,
            )
        speculation.speculator = speculator
        speculation.weights_bytes = model_bytes(speculator)
        if pack:
            pack_linear_layers(speculator, every_linear=True)  # its steps are a few small products
    return speculation


def _size_kv_cache(
    config: EngineConfig,
    model: LlamaForCausalLM,
    scheduler_config: SchedulerConfig,
    *,
    dtype: torch.dtype,
    kv_dtype: torch.dtype,
    device: torch.device,
    max_model_len: int,
    weights: int,
    rss_before: int,
    speculation: _Speculation | None,
    make_runner: Callable[..., ModelRunner] = ModelRunner,
) -> KVCacheBudget:
    """Profile one forward pass at the step's token budget, then plan the cache from what memory is left."""
    tokens = scheduler_config.max_num_batched_tokens
    bs = config.block_size
    probe = make_runner(model, -(-tokens // bs), bs, dtype, device, kv_dtype)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        probe.profile_forward(tokens)
        measured = torch.cuda.max_memory_allocated(device) - base
    else:
        before = max(peak_rss_bytes(), rss_before + weights)
        probe.profile_forward(tokens)
        measured = max(0, peak_rss_bytes() - before)
    del probe
    model.reset_routed_tokens()
    arch = model.config
    draft = speculation.draft_model if speculation is not None else None
    return plan_budget(
        config=arch,
        dtype=kv_dtype,
        device=device,
        weights_bytes=weights,
        activation_bytes=max(measured, analytic_activation_bytes(arch, tokens, dtype)),
        block_size=bs,
        max_model_len=max_model_len,
        max_num_seqs=scheduler_config.max_num_seqs,
        kv_cache_memory=config.kv_cache_memory,
        memory_utilization=config.memory_utilization,
        available_after_profile=available_bytes(device),
        draft_config=draft.config if draft is not None else None,
        draft_weights_bytes=speculation.weights_bytes if speculation is not None else 0,
    )


def _spec_decoder(
    speculation: _Speculation,
    arch: ModelArchConfig,
    sampler: Sampler,
    dtype: torch.dtype,
    device: torch.device,
    kv_dtype: torch.dtype,
    num_blocks: int,
    block_size: int,
) -> SpecDecoder:
    spec_config = speculation.config
    draft = None
    if speculation.draft_model is not None:
        draft = DraftModelProposer(
            speculation.draft_model,
            target_vocab_size=arch.vocab_size,
            dtype=dtype,
            device=device,
            num_blocks=num_blocks,
            kv_dtype=kv_dtype,
            block_size=block_size,
            sampler=sampler,
        )
    speculating = None
    if speculation.speculator is not None:
        lookup = None
        if spec_config.lookup_below > 0:
            lookup = NgramProposer(spec_config.ngram_min, spec_config.ngram_max)
        speculating = SpeculatorProposer(
            speculation.speculator, arch.vocab_size, sampler, lookup, spec_config.lookup_below
        )
    return SpecDecoder(spec_config, sampler, draft, speculating)
