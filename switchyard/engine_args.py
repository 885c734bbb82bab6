"""Engine flags (vLLM's names) and their mapping to `EngineConfig`: the one place CLI flags meet the config.

Every command that loads a model (`serve`, `generate`, `bench offline`) adds these flags; importing this module
loads neither torch nor the engine, so `--help` stays fast and `bench`/`plan` need not import the front door.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from switchyard.config import EngineConfig

KV_CACHE_DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
"""models.kv_cache_dtype's names, listed here for the same reason (tested)."""
QUANTIZATION_NAMES = ("int8", "w8a8", "int4")
"""models.quantization's methods, listed here for the same reason (tested)."""
ATTENTION_BACKEND_NAMES = ("auto", "sdpa", "triton")
"""models.attention_backend's names, listed here for the same reason (tested)."""


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """Engine flags shared by every command that loads a model (names follow vLLM's)."""
    group = parser.add_argument_group("engine")
    group.add_argument(
        "--dtype",
        default="auto",
        help="float32, bfloat16, float16 or auto (the checkpoint's dtype; float32 on a CPU without native bf16)",
    )
    group.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=KV_CACHE_DTYPE_NAMES,
        help="storage dtype of KV cache entries (auto: the model's; fp8 = fp8_e4m3, scale 1)",
    )
    group.add_argument(
        "--quantization",
        "-q",
        default=None,
        choices=QUANTIZATION_NAMES,
        help="quantize the decoder's projections at load: int8 (weights, per channel), w8a8 (int8 weights and "
        "per-token int8 activations) or int4 (weights, groups of 128); default: as the checkpoint is",
    )
    group.add_argument(
        "--chat-template",
        default=None,
        help="a Jinja chat template, or a file holding one, instead of the tokenizer's",
    )
    group.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    group.add_argument(
        "--tensor-parallel-size",
        "-tp",
        type=int,
        default=1,
        help="split the model over N ranks (worker processes; gloo on CPU, NCCL on CUDA, one GPU each)",
    )
    group.add_argument(
        "--attention-backend",
        default="auto",
        choices=ATTENTION_BACKEND_NAMES,
        help="sdpa (gather blocks, PyTorch attention), triton (paged kernel reading block tables in place; "
        "needs CUDA and the gpu extra) or auto (triton on CUDA when installed, else sdpa)",
    )
    group.add_argument(
        "--enforce-eager",
        action="store_true",
        help="on CUDA, run decode steps eagerly instead of replaying captured CUDA graphs",
    )
    group.add_argument("--block-size", type=int, default=16, help="tokens per KV cache block")
    group.add_argument("--max-model-len", type=int, default=None, help="context length to serve")
    group.add_argument(
        "--sliding-window",
        type=int,
        default=None,
        help="serve a model without a window with one of this many tokens: KV blocks that leave it are "
        "released, and --max-model-len may exceed the trained context",
    )
    group.add_argument(
        "--attention-sinks",
        type=int,
        default=0,
        help="with --sliding-window: also keep the first N tokens, at cache positions (StreamingLLM)",
    )
    group.add_argument("--max-num-seqs", type=int, default=256, help="sequences running at once")
    group.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="token budget per step (default 512 CPU / 4096 CUDA)",
    )
    group.add_argument("--kv-cache-memory", type=int, default=None, help="KV cache size in bytes")
    group.add_argument(
        "--memory-utilization",
        type=float,
        default=None,
        help="fraction of device memory (CPU: of available RAM) for weights + activations + KV cache",
    )
    group.add_argument("--seed", type=int, default=0, help="seed of the shared random stream")
    group.add_argument(
        "--kv-full-policy",
        choices=("queue", "preempt", "reject"),
        default="queue",
        help="when the KV cache is full: queue new requests, let more urgent ones preempt less urgent running "
        "ones, or reject with 429 (default: queue)",
    )
    group.add_argument(
        "--max-queue-time",
        type=float,
        default=None,
        help="seconds a request may wait before its first step; longer waits fail with 429 (default: no limit)",
    )
    group.add_argument(
        "--structured-outputs-backend",
        choices=("auto", "xgrammar", "llguidance"),
        default="auto",
        help="grammar library for JSON schemas, regexes, choices, grammars and tool calls; auto (default) sends "
        "each spec to the library that enforces it exactly: llguidance for JSON schemas with regexes or "
        "constructs xgrammar approximates, xgrammar for the rest and for tool calls",
    )
    group.add_argument(
        "--speculative-method",
        choices=("ngram", "draft", "speculator"),
        default=None,
        help="speculative decoding: ngram (prompt lookup; no extra model), draft (a small model with the same "
        "tokenizer, --speculative-model) or speculator (look-ahead heads on the model's own hidden state, "
        "trained by `switchyard train-speculator`; the fastest with the bundled model). Default: off",
    )
    group.add_argument(
        "--speculative-model",
        default=None,
        help="draft model or speculator folder, or bundled name (default with the bundled model: "
        "switchyard-chat-draft for draft, switchyard-chat-speculator for speculator)",
    )
    group.add_argument("--num-speculative-tokens", type=int, default=4, help="tokens proposed per step (4)")
    group.add_argument(
        "--speculative-config",
        default=None,
        help='vLLM\'s form, as JSON: {"method": "ngram"|"draft"|"speculator", "model": ..., '
        '"num_speculative_tokens": k, "prompt_lookup_min": n, "prompt_lookup_max": n}; replaces '
        "--speculative-method and --speculative-model (a model without a method is a draft model)",
    )
    group.add_argument(
        "--spec-max-batch-size",
        type=int,
        default=8,
        help="no speculation while more sequences than this are running (it stops paying); default 8",
    )
    group.add_argument(
        "--spec-adaptive",
        action="store_true",
        help="draft and speculator methods: time speculative and plain decode steps while serving, and "
        "speculate only at the batch sizes where it is faster",
    )
    group.add_argument(
        "--spec-lookup-below",
        type=float,
        default=0.6,
        help="speculator method: where the speculator gives its first guess less probability than this, propose "
        "prompt lookup's continuation instead (copying from the context); 0 turns it off (default 0.6)",
    )
    group.add_argument(
        "--no-prefix-cache",
        dest="enable_prefix_caching",
        action="store_false",
        help="do not reuse the KV cache of shared prompt prefixes across requests",
    )


SPECULATIVE_CONFIG_KEYS = {
    "method": "speculative_method",
    "model": "speculative_model",
    "num_speculative_tokens": "num_speculative_tokens",
    "prompt_lookup_min": "spec_ngram_min",
    "prompt_lookup_max": "spec_ngram_max",
}


def speculative_settings(args: argparse.Namespace) -> dict[str, Any]:
    """EngineConfig's speculation fields from the separate flags, or from vLLM's `--speculative-config` JSON;
    ValueError for a malformed one, an unknown key, or both forms at once."""
    settings: dict[str, Any] = {
        "speculative_method": args.speculative_method,
        "speculative_model": args.speculative_model,
        "num_speculative_tokens": args.num_speculative_tokens,
    }
    text = getattr(args, "speculative_config", None)
    if text is None:
        return settings
    if args.speculative_method is not None or args.speculative_model is not None:
        raise ValueError(
            "--speculative-config replaces --speculative-method and --speculative-model: give one form"
        )
    try:
        given = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--speculative-config is not JSON: {exc}") from exc
    if not isinstance(given, dict):
        raise ValueError("--speculative-config must be a JSON object")
    unknown = sorted(set(given) - set(SPECULATIVE_CONFIG_KEYS))
    if unknown:
        raise ValueError(
            f"--speculative-config: unknown keys {unknown}; supported: {', '.join(SPECULATIVE_CONFIG_KEYS)}"
        )
    for key, value in given.items():
        textual = key in ("method", "model")
        if textual and not isinstance(value, str):
            raise ValueError(f"--speculative-config: {key} must be a string")
        if not textual and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"--speculative-config: {key} must be an integer")
        settings[SPECULATIVE_CONFIG_KEYS[key]] = value
    if settings["speculative_method"] is None:
        if settings["speculative_model"] is None:
            raise ValueError("--speculative-config needs a method or a model")
        settings["speculative_method"] = "draft"
    return settings


def resolve_model_folders(config: EngineConfig) -> EngineConfig:
    """`config` with its model and speculative model as folders, as the engine takes them: bundled names
    resolved, and for speculation with the bundled main model, its bundled draft or speculator when none is
    given. ModelLoadError (typed: not found, or bundled but not built) for a name that is neither."""
    from switchyard.models.registry import default_speculative_model, resolve_model

    model = str(resolve_model(config.model))
    speculative = config.speculative_model
    if config.speculative_method in ("draft", "speculator"):
        speculative = speculative or default_speculative_model(config.model, config.speculative_method)
        if speculative is not None:
            speculative = str(resolve_model(speculative))
    return dataclasses.replace(config, model=model, speculative_model=speculative)


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The engine flags as an EngineConfig, its models resolved to folders (`resolve_model_folders`)."""
    from switchyard.config import EngineConfig

    config = EngineConfig(
        model=args.model,
        chat_template=args.chat_template,
        dtype=args.dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        quantization=args.quantization,
        device=args.device,
        tensor_parallel_size=args.tensor_parallel_size,
        attention_backend=args.attention_backend,
        enforce_eager=args.enforce_eager,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
        sliding_window=args.sliding_window,
        attention_sinks=args.attention_sinks,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_memory=args.kv_cache_memory,
        memory_utilization=args.memory_utilization,
        seed=args.seed,
        enable_prefix_caching=args.enable_prefix_caching,
        kv_full_policy=args.kv_full_policy,
        max_queue_time=args.max_queue_time,
        tenant_weights=getattr(args, "tenant_weights", None) or {},
        structured_outputs_backend=args.structured_outputs_backend,
        **speculative_settings(args),
        spec_max_batch_size=args.spec_max_batch_size,
        spec_adaptive=args.spec_adaptive,
        spec_lookup_below=args.spec_lookup_below,
    )
    return resolve_model_folders(config)
