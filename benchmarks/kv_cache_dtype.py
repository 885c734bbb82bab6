"""KV cache storage dtype (`--kv-cache-dtype`): concurrency and throughput under a fixed KV budget, and the
logprob drift a narrower cache costs, each against a float32 cache in the same run.

The model computes in float32 (what `--dtype auto` picks on a CPU without native bf16); the KV budget is sized
so that a float32 cache holds about `--fit` sequences of the workload at once, so a bf16 cache holds twice and an
fp8 cache four times as many. Throughput: N requests of P prompt + O output tokens (ignore_eos), all at once.
Drift: teacher-forced prompt logprobs of a few prompts, prefilled in small chunks so every chunk reads the cache,
compared with the float32 cache (random-initialised model, so the drift is a property of the cache, not of
trained weights).

Usage: python benchmarks/kv_cache_dtype.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from shapes import SMALL, build_qwen2, random_ids

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.memory import kv_bytes_per_token
from switchyard.engine.sampling_params import SamplingParams
from switchyard.models.config import ModelArchConfig

DTYPES = ("auto", "bfloat16", "fp8_e4m3", "fp8_e5m2")


def make_engine(folder: Path, kv_cache_dtype: str, kv_bytes: int, **kwargs: object) -> LLMEngine:
    settings: dict[str, object] = dict(
        model=str(folder),
        dtype="float32",
        kv_cache_dtype=kv_cache_dtype,
        skip_tokenizer=True,
        max_model_len=2048,
        max_num_seqs=64,
        max_num_batched_tokens=512,
        kv_cache_memory=kv_bytes,
    )
    return LLMEngine(EngineConfig(**{**settings, **kwargs}))  # type: ignore[arg-type]


def throughput(
    folder: Path, kv_cache_dtype: str, kv_bytes: int, args: argparse.Namespace
) -> dict[str, float]:
    engine = make_engine(folder, kv_cache_dtype, kv_bytes)
    params = SamplingParams(temperature=0.0, max_tokens=args.output_len, ignore_eos=True)
    for i, prompt in enumerate(random_ids(args.requests, args.prompt_len, seed=1)):
        engine.add_request(str(i), prompt, params)
    running, steps, generated = [], 0, 0
    started = time.perf_counter()
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                generated += len(output.outputs[0].token_ids)
        running.append(engine.stats().num_running)
        steps += 1
    elapsed = time.perf_counter() - started
    stats = engine.stats()
    return {
        "num_blocks": engine.kv_budget.num_blocks,
        "max_running": max(running),
        "mean_running": sum(running) / len(running),
        "preemptions": stats.num_preemptions,
        "steps": steps,
        "seconds": elapsed,
        "tokens_per_s": (args.requests * args.prompt_len + generated) / elapsed,
        "generated_per_s": generated / elapsed,
    }


def prompt_logprobs(folder: Path, kv_cache_dtype: str, prompts: list[list[int]]) -> list[float]:
    engine = make_engine(folder, kv_cache_dtype, 256 << 20, max_num_batched_tokens=64)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, SamplingParams(max_tokens=1, prompt_logprobs=0))
    by_request: dict[str, list[float]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished and output.prompt_logprobs is not None:
                by_request[output.request_id] = [e.logprob for e in output.prompt_logprobs if e is not None]
    return [value for key in sorted(by_request, key=int) for value in by_request[key]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench-kv-dtype"))
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--fit", type=int, default=6, help="sequences a float32 cache holds at once")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    folder = build_qwen2(args.workdir / "small-fp32", SMALL, dtype=torch.float32)
    arch = ModelArchConfig.from_folder(folder)
    per_sequence = kv_bytes_per_token(arch, torch.float32) * (args.prompt_len + args.output_len + 16)
    kv_bytes = args.fit * per_sequence
    dtypes = args.dtypes.split(",")
    results: dict[str, object] = {
        "model": "random Qwen2, SMALL shape (benchmarks/shapes.py), float32 compute",
        "threads": torch.get_num_threads(),
        "workload": f"{args.requests} x ({args.prompt_len} prompt + {args.output_len} output), all at once",
        "kv_cache_memory": kv_bytes,
    }
    runs = {}
    for name in dtypes:
        runs[name] = throughput(folder, name, kv_bytes, args)
        print(name, {k: round(v, 3) for k, v in runs[name].items()}, flush=True)
    base = runs["auto"]["tokens_per_s"] if "auto" in runs else None
    for run in runs.values():
        if base:
            run["throughput_ratio"] = run["tokens_per_s"] / base
    results["throughput"] = runs
    prompts = random_ids(4, 384, seed=7)
    reference = prompt_logprobs(folder, "auto", prompts)
    drift = {}
    for name in dtypes:
        if name == "auto":
            continue
        values = prompt_logprobs(folder, name, prompts)
        errors = [abs(a - b) for a, b in zip(values, reference, strict=True)]
        drift[name] = {
            "max_abs_logprob_diff": max(errors),
            "mean_abs_logprob_diff": sum(errors) / len(errors),
        }
        print(name, drift[name], flush=True)
    results["drift_vs_float32_cache"] = drift
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
