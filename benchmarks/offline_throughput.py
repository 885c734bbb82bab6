"""Offline engine benchmark (issue: engine core), every number a ratio against a baseline in the same run.

1. Throughput: N requests of P prompt tokens and O output tokens (ignore_eos), Switchyard's continuous
   batching vs transformers `generate` with static batches, greedy, same prompts.
2. Batch-1 decode: tokens/s vs transformers, and achieved weight-read bandwidth as a share of this machine's
   measured memory read bandwidth (the roofline of memory-bound decode).
3. Scheduler + input preparation CPU time per step with 256 running sequences on a tiny model.

Models are random-initialised with the Qwen2.5-0.5B shape (no hub needed), built once into --workdir.
Usage: python benchmarks/offline_throughput.py [--dtypes bfloat16,float32] [--quick]
The measurements live in switchyard/bench/offline.py (`switchyard bench offline` runs one workload); this
script adds the bandwidth roofline and the scheduler micro-benchmark that RESULTS.md reports.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))
from shapes import QWEN25_05B, TINY, build_qwen2

from switchyard import LLM, SamplingParams
from switchyard.bench.offline import (
    hf_decode_rate,
    hf_throughput,
    measure_read_bandwidth,
    random_prompts,
    switchyard_decode_rate,
    switchyard_throughput,
)


def scheduler_overhead(workdir: Path, num_seqs: int = 256, steps: int = 50) -> dict[str, float]:
    """Median CPU time of schedule() and prepare() per decode step with num_seqs running sequences."""
    folder = build_qwen2(workdir / "tiny", TINY, dtype=torch.float32)
    llm = LLM(
        str(folder),
        dtype="float32",
        skip_tokenizer=True,
        max_model_len=1024,
        max_num_seqs=num_seqs,
        max_num_batched_tokens=8192,
        kv_cache_memory=512 << 20,
    )
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=800, ignore_eos=True)
    for i, prompt in enumerate(random_prompts(num_seqs, 200, TINY["vocab_size"], seed=1)):
        engine.add_request(str(i), prompt, params)
    while engine.scheduler.num_waiting or any(s.in_prefill for s in engine.scheduler.running):
        engine.step()
    schedule_times, prepare_times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        plan = engine.scheduler.schedule()
        scheduled = time.perf_counter()
        inputs = engine.runner.prepare(plan.scheduled, set())
        prepared = time.perf_counter()
        result = engine.runner.forward(inputs)
        for seq, num_new in plan.scheduled:
            seq.num_computed_tokens += num_new
        engine._sample(result)
        assert len(plan.scheduled) == num_seqs
        schedule_times.append(scheduled - start)
        prepare_times.append(prepared - scheduled)
    for request_id in list(engine.requests):
        engine.abort_request(request_id)
    return {
        "num_running": num_seqs,
        "schedule_ms": statistics.median(schedule_times) * 1e3,
        "prepare_ms": statistics.median(prepare_times) * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench"))
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--hf-batch", type=int, default=16)
    parser.add_argument("--decode-len", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--quick", action="store_true", help="8 requests, 32 outputs: a smoke run")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.output_len, args.decode_len = 8, 16, 16

    results: dict[str, object] = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    bandwidth = measure_read_bandwidth()
    results["read_bandwidth_GBps"] = bandwidth / 1e9
    print(f"measured read bandwidth: {bandwidth / 1e9:.1f} GB/s", flush=True)
    results["scheduler"] = scheduler_overhead(args.workdir)
    print(f"scheduler at 256 running: {results['scheduler']}", flush=True)

    folder = build_qwen2(args.workdir / "qwen2.5-0.5b-shape", QWEN25_05B)
    prompts = random_prompts(args.requests, args.prompt_len, QWEN25_05B["vocab_size"], seed=0)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        llm = LLM(
            str(folder),
            dtype=dtype_name,
            skip_tokenizer=True,
            max_model_len=args.prompt_len + args.output_len + 16,
            max_num_seqs=max(args.requests, 1),
            max_num_batched_tokens=args.max_num_batched_tokens,
            kv_cache_memory=(args.prompt_len + args.output_len + 32) * args.requests * 24 * 2 * 2 * 64 * 4,
        )
        ours, _ = switchyard_throughput(llm, prompts, args.output_len)
        decode = switchyard_decode_rate(llm, prompts[0][:32], args.decode_len)
        weight_bytes = llm.engine.kv_budget.weights_bytes  # measured before packing: the bytes a step reads
        del llm
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
        theirs, _ = hf_throughput(hf, prompts, args.output_len, args.hf_batch)
        hf_decode = hf_decode_rate(hf, prompts[0][:32], args.decode_len)
        del hf
        entry = {
            "switchyard_tok_s": ours,
            "hf_tok_s": theirs,
            "throughput_ratio": ours / theirs,
            "batch1_switchyard_tok_s": decode,
            "batch1_hf_tok_s": hf_decode,
            "batch1_ratio": decode / hf_decode,
            "weight_bytes": weight_bytes,
            "batch1_bandwidth_GBps": weight_bytes * decode / 1e9,
            "batch1_roofline_pct": 100 * weight_bytes * decode / bandwidth,
        }
        results[dtype_name] = entry
        print(f"{dtype_name}: " + ", ".join(f"{k}={v:.3g}" for k, v in entry.items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
