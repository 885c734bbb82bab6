"""Offline engine benchmark (issue: engine core), every number a ratio against a baseline in the same run.

1. Throughput: N requests of P prompt tokens and O output tokens (ignore_eos), Switchyard's continuous
   batching vs transformers `generate` with static batches, greedy, same prompts.
2. Batch-1 decode: tokens/s vs transformers, and achieved weight-read bandwidth as a share of this machine's
   measured memory read bandwidth (the roofline of memory-bound decode).
3. Scheduler + input preparation CPU time per step with 256 running sequences on a tiny model.

Models are random-initialised with the Qwen2.5-0.5B shape (no hub needed), built once into --workdir.
Usage: python benchmarks/offline_throughput.py [--dtypes bfloat16,float32] [--quick]
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


def measure_read_bandwidth(num_bytes: int = 1 << 30, repeats: int = 8) -> float:
    """Best-of-N bytes/s of summing a tensor much larger than the caches."""
    x = torch.ones(num_bytes // 4, dtype=torch.float32)
    x.sum()
    best = min(_timed(x.sum) for _ in range(repeats))
    return num_bytes / best


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def random_prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(100, vocab - 100, (count, length), generator=generator).tolist()


def switchyard_throughput(llm: LLM, prompts: list[list[int]], output_len: int) -> float:
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    assert all(len(o.outputs[0].token_ids) == output_len for o in outputs)
    return len(prompts) * output_len / elapsed


def hf_throughput(model, prompts: list[list[int]], output_len: int, batch_size: int) -> float:  # type: ignore[no-untyped-def]
    model.generate(torch.tensor(prompts[:2]), max_new_tokens=4, min_new_tokens=4, do_sample=False)
    start = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        batch = torch.tensor(prompts[i : i + batch_size])
        out = model.generate(
            batch,
            attention_mask=torch.ones_like(batch),
            max_new_tokens=output_len,
            min_new_tokens=output_len,
            do_sample=False,
            pad_token_id=0,
        )
        assert out.shape[1] == batch.shape[1] + output_len
    elapsed = time.perf_counter() - start
    return len(prompts) * output_len / elapsed


def switchyard_decode_rate(llm: LLM, prompt: list[int], output_len: int) -> float:
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    output = llm.generate([prompt], params, use_tqdm=False)[0]
    metrics = output.metrics
    assert metrics is not None and metrics.first_token_time and metrics.finished_time
    return (output_len - 1) / (metrics.finished_time - metrics.first_token_time)


def hf_decode_rate(model, prompt: list[int], output_len: int) -> float:  # type: ignore[no-untyped-def]
    ids = torch.tensor([prompt])
    kwargs = dict(do_sample=False, pad_token_id=0)
    model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kwargs)
    prefill = min(
        _timed(lambda: model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kwargs)) for _ in range(3)
    )
    total = _timed(
        lambda: model.generate(ids, max_new_tokens=output_len, min_new_tokens=output_len, **kwargs)
    )
    return (output_len - 1) / (total - prefill)


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
        ours = switchyard_throughput(llm, prompts, args.output_len)
        decode = switchyard_decode_rate(llm, prompts[0][:32], args.decode_len)
        weight_bytes = llm.engine.kv_budget.weights_bytes  # measured before packing: the bytes a step reads
        del llm
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
        with torch.inference_mode():
            theirs = hf_throughput(hf, prompts, args.output_len, args.hf_batch)
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
