"""Prefix cache and priority benchmarks (issue: prefix caching and scheduling policy), ratios in one run.

1. Shared 1k-token system prompt, 64 requests with distinct 64-token suffixes, all arriving at once:
   TTFT p50 with the prefix cache vs `enable_prefix_caching=False`.
2. 0% hit rate (64 distinct prompts): throughput with the cache on vs off, alternated to average out noise.
3. A low-priority flood at saturation plus urgent (priority -1) requests arriving one at a time: p99 TTFT of
   the urgent stream vs the same stream on an idle engine (kv_full_policy="preempt").

The model is random-initialised with a small Llama shape (~40M parameters) so the run takes minutes on a CPU.
Usage: python benchmarks/scheduling.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from shapes import SMALL, build_qwen2, random_ids

from switchyard import LLM, SamplingParams
from switchyard.engine.engine import LLMEngine


def make_llm(folder: Path, **kwargs: object) -> LLM:
    args: dict[str, object] = dict(
        dtype="bfloat16",
        skip_tokenizer=True,
        max_model_len=2048,
        max_num_seqs=64,
        max_num_batched_tokens=512,
        kv_cache_memory=1 << 30,
    )
    return LLM(str(folder), **{**args, **kwargs})


def ttfts(llm: LLM, prompts: list[list[int]], max_tokens: int) -> list[float]:
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True))
    return [o.metrics.time_to_first_token for o in outputs if o.metrics and o.metrics.time_to_first_token]


def shared_prefix(folder: Path) -> dict[str, float]:
    system = random_ids(1, 1024, seed=1)[0]
    prompts = [system + suffix for suffix in random_ids(64, 64, seed=2)]
    results = {}
    for cached in (True, False):
        llm = make_llm(folder, enable_prefix_caching=cached)
        llm.generate(random_ids(2, 32, seed=9), SamplingParams(max_tokens=2))  # warm-up
        start = time.perf_counter()
        times = ttfts(llm, prompts, max_tokens=16)
        results["cache" if cached else "no_cache"] = {
            "ttft_p50_s": statistics.median(times),
            "wall_s": time.perf_counter() - start,
        }
    results["ttft_p50_ratio"] = results["no_cache"]["ttft_p50_s"] / results["cache"]["ttft_p50_s"]  # type: ignore[index]
    return results


def zero_hit_throughput(folder: Path, rounds: int = 6) -> dict[str, float]:
    prompts = random_ids(64, 256, seed=3)
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    engines = {flag: make_llm(folder, enable_prefix_caching=flag) for flag in (True, False)}
    rates: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for flag in (True, False) if r % 2 == 0 else (False, True):
            llm = engines[flag]
            # Fresh prompts each round so the cache never hits.
            batch = [[(t + 7 * r + 1) % 30000 + 100 for t in p] for p in prompts]
            start = time.perf_counter()
            llm.generate(batch, params, use_tqdm=False)
            rates[flag].append(64 * 64 / (time.perf_counter() - start))
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    return {"cache_tok_s": on, "no_cache_tok_s": off, "loss_pct": 100 * (1 - on / off)}


def urgent_ttfts(engine: LLMEngine, urgent: list[list[int]], flood: list[list[int]] | None) -> list[float]:
    """Submit the flood (priority 5) up front, then each urgent request (priority -1) once the previous one
    got its first token; return the urgent requests' TTFTs."""
    low = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
    quick = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    for i, prompt in enumerate(flood or []):
        engine.add_request(f"low-{i}", prompt, low, priority=5)
    for _ in range(20 if flood else 0):  # reach saturation: the running batch full of low-priority work
        engine.step()
    times = []
    for i, prompt in enumerate(urgent):
        request_id = f"urgent-{i}"
        engine.add_request(request_id, prompt, quick, priority=-1)
        while True:
            outputs = {o.request_id: o for o in engine.step()}
            output = outputs.get(request_id)
            if output is not None and output.metrics and output.metrics.first_token_time:
                times.append(output.metrics.time_to_first_token)
                break
    for request_id in list(engine.requests):
        engine.abort_request(request_id)
    while engine.has_unfinished_requests():
        engine.step()
    return times


def priority_isolation(folder: Path) -> dict[str, float]:
    urgent = random_ids(40, 128, seed=4)
    idle = make_llm(folder, kv_full_policy="preempt").engine
    idle_times = urgent_ttfts(idle, urgent, None)
    busy = make_llm(folder, kv_full_policy="preempt", kv_cache_memory=64 << 20).engine
    busy_times = urgent_ttfts(busy, urgent, random_ids(256, 256, seed=5))

    def p99(values: list[float]) -> float:
        return statistics.quantiles(values, n=100)[98]

    return {
        "idle_p99_s": p99(idle_times),
        "saturated_p99_s": p99(busy_times),
        "p99_ratio": p99(busy_times) / p99(idle_times),
        "preemptions": busy.scheduler.num_preemptions,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", choices=("prefix", "zero-hit", "priority"), default=None)
    args = parser.parse_args(argv)
    folder = build_qwen2(args.workdir / "small", SMALL)
    results: dict[str, object] = {}
    for name, fn in (
        ("prefix", shared_prefix),
        ("zero-hit", zero_hit_throughput),
        ("priority", priority_isolation),
    ):
        if args.only in (None, name):
            results[name] = fn(folder)
            print(f"{name}: {json.dumps(results[name])}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
