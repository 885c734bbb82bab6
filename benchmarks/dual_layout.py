"""A small model's projections in both layouts (`packed_linear.DUAL_LAYOUT_MAX_BYTES`) against packed only.

The bundled chat model at the default `--max-num-seqs` (256): with packed weights only, a decode step of one
sequence runs operator by operator on oneDNN's packed layout; keeping the plain layout beside it lets the step
run as one native call (models/native_decode.py), while larger products keep the packed copy. Both engines live
in this process and their requests alternate: single-stream decode (ms per token over 128 tokens after a
50-token prompt) and a batch of 32 (output tokens/s), best of the repeats.
Usage: python benchmarks/dual_layout.py [--model switchyard-chat] [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from switchyard import LLM, SamplingParams
from switchyard.models import packed_linear


def engine(model: str, dual: bool) -> LLM:
    keep = packed_linear.DUAL_LAYOUT_MAX_BYTES
    packed_linear.DUAL_LAYOUT_MAX_BYTES = keep if dual else 0
    try:
        return LLM(model, max_num_seqs=256)
    finally:
        packed_linear.DUAL_LAYOUT_MAX_BYTES = keep


def timed(llm: LLM, prompts: list[list[int]], tokens: int) -> float:
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    start = time.perf_counter()
    llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="switchyard-chat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    engines = {"packed only": engine(args.model, False), "both layouts": engine(args.model, True)}
    single = [list(range(10, 60))]
    batch = [list(range(10 + i, 60 + i)) for i in range(32)]
    best: dict[str, dict[str, float]] = {name: {"single": 1e9, "batch": 1e9} for name in engines}
    for llm in engines.values():  # warm-up
        timed(llm, single, 8)
    for _ in range(args.repeats):
        for name, llm in engines.items():
            best[name]["single"] = min(best[name]["single"], timed(llm, single, 129) - timed(llm, single, 1))
            best[name]["batch"] = min(best[name]["batch"], timed(llm, batch, 64))
    results = {
        name: {"single_ms_per_token": times["single"] / 128 * 1e3, "batch32_tok_s": 32 * 64 / times["batch"]}
        for name, times in best.items()
    }
    base, new = results["packed only"], results["both layouts"]
    results["ratios"] = {
        "single_stream_speedup": base["single_ms_per_token"] / new["single_ms_per_token"],
        "batch32_throughput_ratio": new["batch32_tok_s"] / base["batch32_tok_s"],
    }
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(
            json.dumps({"model": args.model, "threads": args.threads, **results}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
