"""Quantized experts in a mixture (issue 51): weight bytes and decode step time, bf16 against each scheme.

A random Qwen3-MoE model (`shapes.QWEN3_MOE_SMALL`: 32 experts of width 512, 4 per token, 8 layers) is served
by one `LLM` per format in this process. Two befores are reproduced so that they are measured in the same run:
`NAME-attn`, where `--quantization` left the routed experts in bf16 and quantized only attention (and a shared
expert); and `NAME-ops`, the decode step operator by operator, as mixtures ran before the native decode step
(models/native_decode.py) took them. Decode steps are timed interleaved across the
engines (one step of each in turn), at batch 1 and at batch 8, after each engine's requests have finished their
prefill; medians are what to read. Weight bytes are what the engine's KV budget counts.
`--shape qwen3_06b` runs the same comparison on a dense model with q/k norms (Qwen3-0.6B's body, vocab 8192),
which the native decode step did not take before either; its formats have no `-attn` variant.
Usage: python benchmarks/moe_quantized_decode.py [--shape qwen3_moe_small|qwen3_06b] [--formats ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).parent))
from shapes import QWEN3_06B, QWEN3_MOE_SMALL, build_random, random_ids

from switchyard import LLM, SamplingParams
from switchyard.models.quantization import apply

FORMATS = ("bf16-ops", "bf16", "int8-attn", "int8-ops", "int8", "int4-attn", "int4-ops", "int4")
"""NAME-attn: experts left in bf16 (the behaviour before quantized experts); NAME-ops: the decode step operator
by operator (`model.native_decode = False`), the behaviour before the native step took mixtures."""


def engine_for(folder: Path, name: str) -> LLM:
    base = name.removesuffix("-attn").removesuffix("-ops")
    method = None if base == "bf16" else base
    keep = apply._quantized_experts
    if name.endswith("-attn"):  # the behaviour before: experts stay stacked in dtype
        apply._quantized_experts = lambda *_: None  # type: ignore[assignment]
    try:
        llm = LLM(
            str(folder),
            dtype="bfloat16",
            skip_tokenizer=True,
            quantization=method,
            max_model_len=2048,
            max_num_seqs=8,
            kv_cache_memory=512 << 20,
        )
    finally:
        apply._quantized_experts = keep  # type: ignore[assignment]
    llm.engine.model.native_decode = not name.endswith("-ops")
    return llm


def start(llm: LLM, prompts: list[list[int]], steps: int) -> None:
    """Requests past their prefill, decoding for as long as they are stepped."""
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=steps + 16, ignore_eos=True)
    for index, prompt in enumerate(prompts):
        engine.add_request(f"r{index}", prompt, params)
    while any(seq.in_prefill for seq in engine.scheduler.running) or engine.scheduler.num_waiting:
        engine.step()


def stop(llm: LLM) -> None:
    engine = llm.engine
    for request_id in list(engine.requests):
        engine.abort_request(request_id)
    while engine.has_unfinished_requests():
        engine.step()


def timed_steps(engines: dict[str, LLM], batch: int, steps: int) -> dict[str, float]:
    prompts = random_ids(batch, 128, seed=batch, vocab_size=8192)
    for llm in engines.values():
        start(llm, prompts, steps)
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in tqdm(range(steps), desc=f"batch {batch}", leave=False):
        for name, llm in engines.items():
            begin = time.perf_counter()
            llm.engine.step()
            times[name].append(time.perf_counter() - begin)
    for llm in engines.values():
        stop(llm)
    return {name: statistics.median(values[3:]) * 1e3 for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("qwen3_moe_small", "qwen3_06b"), default="qwen3_moe_small")
    parser.add_argument("--formats", default=None, help="comma-separated; default: every format of the shape")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.shape == "qwen3_06b":
        shape = {**QWEN3_06B, "vocab_size": 8192}
        folder = build_random(args.workdir / "qwen3-0.6b-shape-v8192", "qwen3", shape)
        formats = [name for name in FORMATS if not name.endswith("-attn")]
    else:
        shape = QWEN3_MOE_SMALL
        folder = build_random(args.workdir / "qwen3-moe-small-v8192", "qwen3_moe", shape)
        formats = list(FORMATS)
    engines = {
        name: engine_for(folder, name) for name in (args.formats.split(",") if args.formats else formats)
    }
    results: dict[str, Any] = {
        "shape": shape,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "weights_MiB": {name: llm.engine.kv_budget.weights_bytes / 2**20 for name, llm in engines.items()},
        "ms_per_step": {f"batch {batch}": timed_steps(engines, batch, args.steps) for batch in (1, 8)},
    }
    base = "bf16" if "bf16" in engines else next(iter(engines))
    print(
        f"{'format':<10} {'weights MiB':>12} {'batch 1 ms':>11} {'batch 8 ms':>11}  (x vs {base}: bytes, b1, b8)"
    )
    for name in engines:
        weights, b1, b8 = (
            results["weights_MiB"][name],
            results["ms_per_step"]["batch 1"][name],
            results["ms_per_step"]["batch 8"][name],
        )
        ratios = (
            results["weights_MiB"][base] / weights,
            results["ms_per_step"]["batch 1"][base] / b1,
            results["ms_per_step"]["batch 8"][base] / b8,
        )
        print(
            f"{name:<10} {weights:>12.1f} {b1:>11.2f} {b8:>11.2f}  " + " ".join(f"{r:.2f}x" for r in ratios)
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
