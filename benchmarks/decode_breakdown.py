"""Where a batch-1 decode step goes (issue 51, item 1), measured without `perf`.

On a random model of the Qwen2.5-0.5B body (vocab 8192 by default), for each weight format asked for:
1. GEMV time per projection shape, one token row: oneDNN-packed bf16 vs `_weight_int8pack_mm` (int8) vs
   `_weight_int4pack_mm_for_cpu` (int4, group 128), timed interleaved in one loop, medians, with the bytes
   each reads per call and the bandwidth that implies;
2. the engine's batch-1 decode step split into scheduler + input preparation, the model forward, the LM head
   and sampling + output bookkeeping (timers around the engine's own calls), interleaved across formats;
3. torch.profiler over a few decode steps: operators per step and per layer, and each operator's share of
   self CPU time;
4. the attention block gather alone at the step's context length;
5. the machine's memory-read bandwidth, and the weight bytes a step reads as a share of it.

The machine may be shared. With `--threads 1` (the default) every time is the CPU time of the one thread that
runs the step (`time.thread_time`), which time slices lost to other processes do not inflate; wall time is
printed beside it. Medians of interleaved repetitions, and their ratios, are what to read.
Usage: python benchmarks/decode_breakdown.py [--formats bf16,int8,int4] [--steps 64] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from shapes import QWEN25_05B, build_qwen2

from switchyard import LLM, SamplingParams
from switchyard.bench.offline import random_prompts
from switchyard.models.attention import _gather
from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.native_library import DISABLE_ENV, native_kernels
from switchyard.models.packed_linear import PackedLinear
from switchyard.models.quantization.int4_linear import Int4Linear
from switchyard.models.quantization.int8_linear import Int8Linear

FORMATS = {"bf16": None, "int8": "int8", "int4": "int4"}
"""A format named NAME-torch is NAME with the native CPU kernels off (PyTorch's kernels), NAME-ops is NAME with
the native products but each decoder layer run operator by operator (no fused native decode step,
models/native_decode.py): the befores of two changes."""


def projection_shapes(shape: dict) -> dict[str, tuple[int, int]]:
    """(out, in) of each decoder projection after the load-time fusions, and the LM head."""
    hidden, inter = shape["hidden_size"], shape["intermediate_size"]
    head_dim = hidden // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * head_dim
    return {
        "qkv_proj": (hidden + 2 * kv, hidden),
        "o_proj": (hidden, hidden),
        "gate_up_proj": (2 * inter, hidden),
        "down_proj": (hidden, inter),
        "lm_head": (shape["vocab_size"], hidden),
    }


def gemv_table(shape: dict, reps: int, clock: Any) -> dict[str, dict[str, dict[str, float]]]:
    """Median microseconds and GB/s per projection per kernel, one token row, kernels interleaved."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, (out_f, in_f) in projection_shapes(shape).items():
        linear = torch.nn.Linear(in_f, out_f, bias=False).to(torch.bfloat16)
        torch.nn.init.normal_(linear.weight, std=0.02)
        with torch_kernels_only():
            kernels = {
                "bf16 F.linear": (linear, out_f * in_f * 2),
                "bf16 packed": (PackedLinear(linear), out_f * in_f * 2),
                "int8": (Int8Linear(linear), out_f * in_f + out_f * 2),
                "int4": (Int4Linear(linear), out_f * in_f // 2 + out_f * in_f // 128 * 4),
            }
        native = native_kernels()
        if native is not None:
            weight = linear.weight.detach().contiguous()
            kernels["bf16 native"] = (
                lambda x, w=weight, k=native: skinny_matmul.bf16_matmul(k, x, w, None),
                out_f * in_f * 2,
            )
            kernels["int8 native"] = (Int8Linear(linear), out_f * in_f + out_f * in_f // 128 * 4 + out_f * 4)
            kernels["int4 native"] = (Int4Linear(linear), out_f * in_f // 2 + out_f * in_f // 128 * 8)
        x = torch.randn(1, in_f, dtype=torch.bfloat16)
        times: dict[str, list[float]] = {k: [] for k in kernels}
        with torch.inference_mode():
            for module, _ in kernels.values():
                module(x)
            for _ in range(reps):
                for kernel, (module, _) in kernels.items():
                    start = clock()
                    module(x)
                    times[kernel].append(clock() - start)
        results[name] = {
            kernel: {
                "us": statistics.median(times[kernel]) * 1e6,
                "GBps": nbytes / statistics.median(times[kernel]) / 1e9,
            }
            for kernel, (_, nbytes) in kernels.items()
        }
    return results


@contextlib.contextmanager
def torch_kernels_only() -> Iterator[None]:
    """Layers built inside use PyTorch's kernels, not the native ones."""
    previous = os.environ.get(DISABLE_ENV)
    os.environ[DISABLE_ENV] = "0"
    native_kernels.cache_clear()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DISABLE_ENV, None)
        else:
            os.environ[DISABLE_ENV] = previous
        native_kernels.cache_clear()


class StepTimers:
    """Wall time of each part of LLMEngine.step, by wrapping the engine's own calls (no change to them)."""

    def __init__(self, engine: Any, clock: Any) -> None:
        self.clock = clock
        self.parts: dict[str, list[float]] = collections.defaultdict(list)
        runner = engine.runner
        model = runner.model
        self._wrap(runner, "prepare", "prepare")
        self._wrap(model, "forward", "forward")
        self._wrap(model, "compute_logits", "lm_head")
        self._wrap(engine, "_sample", "sample")
        self._wrap(engine.scheduler, "schedule", "schedule")

    def _wrap(self, owner: Any, attr: str, part: str) -> None:
        inner = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = self.clock()
            try:
                return inner(*args, **kwargs)
            finally:
                self.parts[part].append(self.clock() - start)

        setattr(owner, attr, timed)


def decode_engine(folder: Path, quantization: str | None, context: int, extra: dict[str, Any]) -> LLM:
    return LLM(
        str(folder),
        dtype="bfloat16",
        skip_tokenizer=True,
        quantization=quantization,
        max_model_len=context + 3100,
        max_num_seqs=8,
        kv_cache_memory=256 << 20,
        **extra,
    )


def start_decoding(llm: LLM, prompt: list[int]) -> None:
    """One request past its prefill, decoding as long as it is stepped."""
    engine = llm.engine
    llm.reset_prefix_cache()
    engine.add_request("decode", prompt, SamplingParams(temperature=0, max_tokens=3000, ignore_eos=True))
    while any(seq.in_prefill for seq in engine.scheduler.running) or engine.scheduler.num_waiting:
        engine.step()


def op_profile(llm: LLM, steps: int, layers: int) -> dict[str, Any]:
    """Operators per decode step (and per layer), and the largest self-CPU shares."""
    engine = llm.engine
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            engine.step()
    events = [e for e in prof.key_averages() if e.key.startswith("aten::") or e.key.startswith("mkldnn::")]
    total_self = sum(e.self_cpu_time_total for e in events) or 1.0
    # Operators that do work of their own (dispatcher wrappers such as aten::linear have ~no self time).
    counted = sorted(events, key=lambda e: -e.self_cpu_time_total)
    return {
        "aten_calls_per_step": sum(e.count for e in events) / steps,
        "aten_calls_per_layer": sum(e.count for e in events) / steps / layers,
        "top_self_cpu": [
            {
                "op": e.key,
                "calls_per_step": e.count / steps,
                "share": e.self_cpu_time_total / total_self,
                "us_per_step": e.self_cpu_time_total / steps,
            }
            for e in counted[:14]
        ],
        "calls_per_step_by_op": {e.key: e.count / steps for e in sorted(events, key=lambda e: -e.count)},
    }


def gather_time(llm: LLM, context: int, reps: int, clock: Any) -> float:
    """Median microseconds of the per-layer K and V block gather at this context length (one sequence)."""
    runner = llm.engine.runner
    k_cache, v_cache = runner.kv_caches[0]
    blocks = -(-context // runner.block_size)
    table = torch.arange(blocks).view(1, -1)
    times = []
    for _ in range(reps):
        start = clock()
        _gather(k_cache, table, torch.bfloat16)
        _gather(v_cache, table, torch.bfloat16)
        times.append(clock() - start)
    return statistics.median(times) * 1e6


def overhead_step_ms(
    workdir: Path, shape: dict, context: int, steps: int, clock: Any, native_decode: bool = True
) -> float:
    """Median step time of a model with the same layers and operators but tiny matrices: what a step costs in
    per-operator dispatch, Python and engine bookkeeping, whatever the weights (with `native_decode` False,
    operator by operator)."""
    tiny = {
        **shape,
        "hidden_size": 128,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "vocab_size": 512,
    }
    llm = decode_engine(build_qwen2(workdir / "overhead-graph", tiny), None, context, {})
    llm.engine.model.native_decode = native_decode
    start_decoding(llm, random_prompts(1, context, 512, seed=0)[0])
    times = []
    for _ in range(steps):
        start = clock()
        llm.engine.step()
        times.append(clock() - start)
    return statistics.median(times[4:]) * 1e3


def read_bandwidth(clock: Any, num_bytes: int = 1 << 30, repeats: int = 8) -> float:
    """Bytes/s of the fastest of a sum and a bf16 GEMV over a buffer far larger than the caches, on the threads
    the run uses (what a decode step can read at best here)."""
    floats = torch.ones(num_bytes // 4)
    row = torch.ones(1, 8192, dtype=torch.bfloat16)
    packed = PackedLinear(torch.nn.Linear(8192, num_bytes // 2 // 8192, bias=False, dtype=torch.bfloat16))
    best = []
    for fn in (floats.sum, lambda: packed(row)):
        fn()
        times = []
        for _ in range(repeats):
            start = clock()
            fn()
            times.append(clock() - start)
        best.append(min(times))
    return num_bytes / min(best)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench"))
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--formats", default="bf16,int8,int4")
    parser.add_argument("--context", type=int, default=256, help="prompt tokens before decoding")
    parser.add_argument("--steps", type=int, default=64, help="decode steps per format per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the formats")
    parser.add_argument("--gemv-reps", type=int, default=200)
    parser.add_argument("--profile-steps", type=int, default=8)
    parser.add_argument("--compile", action="store_true", help="also time the bf16 engine with --compile")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads; 1 times CPU time, immune to lost time slices"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.perf_counter

    shape = {**QWEN25_05B, "vocab_size": args.vocab_size}
    folder = build_qwen2(args.workdir / f"qwen2.5-0.5b-shape-v{args.vocab_size}", shape)
    results: dict[str, Any] = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    bandwidth = read_bandwidth(clock)
    results["read_bandwidth_GBps"] = bandwidth / 1e9
    print(f"read bandwidth {bandwidth / 1e9:.1f} GB/s", flush=True)

    results["gemv"] = gemv_table(shape, args.gemv_reps, clock)
    for name, kernels in results["gemv"].items():
        row = ", ".join(f"{k} {v['us']:.0f} us ({v['GBps']:.1f} GB/s)" for k, v in kernels.items())
        print(f"GEMV {name}: {row}", flush=True)

    variants: dict[str, tuple[str | None, dict[str, Any]]] = {
        name: (FORMATS[name.removesuffix("-torch").removesuffix("-ops")], {})
        for name in args.formats.split(",")
    }
    if args.compile:
        variants["bf16+compile"] = (None, {"compile": True})
    prompt = random_prompts(1, args.context, args.vocab_size, seed=0)[0]
    engines: dict[str, LLM] = {}
    timers: dict[str, StepTimers] = {}
    for name, (quantization, extra) in variants.items():
        with torch_kernels_only() if name.endswith("-torch") else contextlib.nullcontext():
            llm = decode_engine(folder, quantization, args.context, extra)
        llm.engine.model.native_decode = not name.endswith("-ops")
        start_decoding(llm, prompt)
        for _ in range(4):  # warm-up (and compilation, when asked)
            llm.engine.step()
        engines[name], timers[name] = llm, StepTimers(llm.engine, clock)
    step_times: dict[str, list[float]] = {name: [] for name in engines}
    wall_times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, llm in engines.items():
            for _ in range(args.steps):
                start, wall = clock(), time.perf_counter()
                llm.engine.step()
                step_times[name].append(clock() - start)
                wall_times[name].append(time.perf_counter() - wall)

    layers = shape["num_hidden_layers"]
    results["steps"] = {}
    for name, llm in engines.items():
        parts = {part: statistics.median(v) * 1e3 for part, v in timers[name].parts.items()}
        step_ms = statistics.median(step_times[name]) * 1e3
        weights = llm.engine.kv_budget.weights_bytes
        entry = {
            "step_ms": step_ms,
            "wall_step_ms": statistics.median(wall_times[name]) * 1e3,
            "parts_ms": parts,
            "other_ms": step_ms
            - sum(parts.get(p, 0.0) for p in ("schedule", "prepare", "forward", "lm_head", "sample")),
            "weight_bytes": weights,
            "bandwidth_share": weights / (step_ms / 1e3) / bandwidth,
            "profile": op_profile(llm, args.profile_steps, layers),
        }
        results["steps"][name] = entry
        print(
            f"{name}: step {step_ms:.1f} ms (wall {entry['wall_step_ms']:.1f}) = "
            + ", ".join(f"{p} {v:.2f}" for p, v in parts.items())
            + f", other {entry['other_ms']:.2f}; weights {weights / 1e6:.0f} MB -> "
            f"{entry['bandwidth_share']:.0%} of read bandwidth; "
            f"{entry['profile']['aten_calls_per_step']:.0f} ops/step "
            f"({entry['profile']['aten_calls_per_layer']:.1f}/layer)",
            flush=True,
        )
        for op in entry["profile"]["top_self_cpu"][:8]:
            print(f"    {op['op']:40s} {op['calls_per_step']:6.1f}/step {op['share']:6.1%}", flush=True)
    first = next(iter(engines.values()))
    overhead = overhead_step_ms(args.workdir, shape, args.context, args.steps * args.rounds, clock)
    by_operators = overhead_step_ms(
        args.workdir, shape, args.context, args.steps * args.rounds, clock, native_decode=False
    )
    results["same_graph_tiny_matrices_step_ms"] = overhead
    results["same_graph_tiny_matrices_step_ms_by_operators"] = by_operators
    print(
        f"the same 24-layer graph with tiny matrices: {overhead:.2f} ms per step (fixed overhead; operator by "
        f"operator: {by_operators:.2f} ms)"
    )
    results["gather_us_per_layer"] = gather_time(first, args.context + args.steps, 200, clock)
    print(f"K+V block gather per layer at context ~{args.context}: {results['gather_us_per_layer']:.0f} us")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
