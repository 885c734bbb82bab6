"""Offline throughput of the engine on token-id prompts, and the same prompts through `transformers.generate`.

Both sides get identical prompts (random ids, optionally behind a shared prefix), greedy decoding and exactly
`output_len` new tokens each (`ignore_eos` / `min_new_tokens`), so the ratio compares engines, not workloads.
The baseline runs static batches of `hf_batch_size`, as a plain `generate` loop would. With `repeats` > 1 the
two sides alternate and each keeps its best run: on a shared machine a neighbour's burst then penalises a single
run of one side rather than the ratio.

The offline mode is the one part of `bench` that loads the engine (the rest is a client of the HTTP API);
`bench/cli.py` imports this module only when `bench offline` runs.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine_args import engine_config_from_args
from switchyard.llm import LLM


@dataclass(frozen=True)
class OfflineWorkload:
    num_prompts: int = 64
    input_len: int = 256
    """Tokens per prompt, after the shared prefix."""
    output_len: int = 128
    prefix_len: int = 0
    """Tokens of a prefix every prompt shares (0: none)."""
    seed: int = 0


@dataclass(frozen=True)
class OfflineResult:
    """Best of the repeats for each side; `trials` keeps every run's tokens/s in the order they ran."""

    switchyard_tok_s: float
    switchyard_seconds: float
    hf_tok_s: float | None = None
    hf_seconds: float | None = None
    batch1_switchyard_tok_s: float | None = None
    batch1_hf_tok_s: float | None = None
    trials: tuple[dict[str, float | None], ...] = ()

    @property
    def throughput_ratio(self) -> float | None:
        return self.switchyard_tok_s / self.hf_tok_s if self.hf_tok_s else None

    @property
    def batch1_ratio(self) -> float | None:
        if self.batch1_switchyard_tok_s and self.batch1_hf_tok_s:
            return self.batch1_switchyard_tok_s / self.batch1_hf_tok_s
        return None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "throughput_ratio": self.throughput_ratio, "batch1_ratio": self.batch1_ratio}


def random_prompts(count: int, length: int, vocab: int, seed: int, prefix_len: int = 0) -> list[list[int]]:
    """Token ids away from both ends of the vocabulary (where special tokens usually sit)."""
    generator = torch.Generator().manual_seed(seed)
    low, high = min(100, vocab // 4), max(vocab - 100, vocab * 3 // 4)
    prefix = torch.randint(low, high, (prefix_len,), generator=generator).tolist()
    return [prefix + row for row in torch.randint(low, high, (count, length), generator=generator).tolist()]


def measure_read_bandwidth(num_bytes: int = 1 << 30, repeats: int = 8) -> float:
    """Best-of-N bytes/s of summing a tensor much larger than the caches (this machine's decode roofline)."""
    x = torch.ones(num_bytes // 4, dtype=torch.float32)
    x.sum()
    return num_bytes / min(_timed(x.sum) for _ in range(repeats))


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def switchyard_throughput(llm: LLM, prompts: list[list[int]], output_len: int) -> tuple[float, float]:
    """(output tokens/s, seconds) for all prompts at once, after a short warm-up."""
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    # Every run computes its prompts, warm-up included: a repeat would otherwise find them in the prefix cache.
    llm.reset_prefix_cache()
    llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    llm.reset_prefix_cache()
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    if any(len(o.outputs[0].token_ids) != output_len for o in outputs):
        raise RuntimeError("a request stopped before output_len despite ignore_eos")
    return len(prompts) * output_len / elapsed, elapsed


def hf_throughput(model, prompts: list[list[int]], output_len: int, batch_size: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(output tokens/s, seconds) of `generate` over static batches of equal-length prompts."""
    kwargs: dict[str, Any] = dict(do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        model.generate(torch.tensor(prompts[:2]), max_new_tokens=4, min_new_tokens=4, **kwargs)
        start = time.perf_counter()
        for i in range(0, len(prompts), batch_size):
            batch = torch.tensor(prompts[i : i + batch_size])
            out = model.generate(
                batch,
                attention_mask=torch.ones_like(batch),
                max_new_tokens=output_len,
                min_new_tokens=output_len,
                **kwargs,
            )
            if out.shape[1] != batch.shape[1] + output_len:
                raise RuntimeError("transformers stopped before output_len")
        elapsed = time.perf_counter() - start
    return len(prompts) * output_len / elapsed, elapsed


def switchyard_decode_rate(llm: LLM, prompt: list[int], output_len: int) -> float:
    """Batch-1 decode tokens/s (first token excluded, so prefill does not count)."""
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    output = llm.generate([prompt], params, use_tqdm=False)[0]
    metrics = output.metrics
    if metrics is None or not metrics.first_token_time or not metrics.finished_time:
        raise RuntimeError("the engine reported no timing for the decode run")
    return (output_len - 1) / (metrics.finished_time - metrics.first_token_time)


def hf_decode_rate(model, prompt: list[int], output_len: int) -> float:  # type: ignore[no-untyped-def]
    """Batch-1 decode tokens/s of `generate`: total time minus the best of three prefill-only runs."""
    ids = torch.tensor([prompt])
    kwargs: dict[str, Any] = dict(do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kwargs)
        prefill = min(
            _timed(lambda: model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kwargs))
            for _ in range(3)
        )
        total = _timed(
            lambda: model.generate(ids, max_new_tokens=output_len, min_new_tokens=output_len, **kwargs)
        )
    return (output_len - 1) / (total - prefill)


def load_hf_baseline(folder: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()


def run_offline(
    llm: LLM,
    workload: OfflineWorkload,
    *,
    baseline: str = "none",
    hf_batch_size: int = 16,
    decode_len: int = 0,
    repeats: int = 1,
) -> OfflineResult:
    """Switchyard and (baseline='hf') transformers on the same prompts, alternating `repeats` times.

    Both models stay loaded for the whole run, so the baseline needs the model's memory a second time.
    """
    prompts = random_prompts(
        workload.num_prompts,
        workload.input_len,
        llm.engine.model_config.vocab_size,
        workload.seed,
        workload.prefix_len,
    )
    model = load_hf_baseline(str(llm.engine.model_path), llm.engine.dtype) if baseline == "hf" else None
    trials: list[dict[str, float | None]] = []
    for _ in range(repeats):
        ours, ours_seconds = switchyard_throughput(llm, prompts, workload.output_len)
        theirs, theirs_seconds = (
            hf_throughput(model, prompts, workload.output_len, hf_batch_size) if model else (None, None)
        )
        decode = switchyard_decode_rate(llm, prompts[0][:32], decode_len) if decode_len > 1 else None
        hf_decode = hf_decode_rate(model, prompts[0][:32], decode_len) if model and decode_len > 1 else None
        trials.append(
            dict(
                switchyard_tok_s=ours,
                switchyard_seconds=ours_seconds,
                hf_tok_s=theirs,
                hf_seconds=theirs_seconds,
                batch1_switchyard_tok_s=decode,
                batch1_hf_tok_s=hf_decode,
            )
        )

    def best(key: str) -> float | None:
        values = [t[key] for t in trials if t[key] is not None]
        return max(values) if values else None  # type: ignore[type-var]

    def best_seconds(rate_key: str, seconds_key: str) -> float | None:
        runs = [t for t in trials if t[rate_key] is not None]
        return max(runs, key=lambda t: t[rate_key])[seconds_key] if runs else None  # type: ignore[arg-type,return-value]

    return OfflineResult(
        switchyard_tok_s=best("switchyard_tok_s"),  # type: ignore[arg-type]
        switchyard_seconds=best_seconds("switchyard_tok_s", "switchyard_seconds"),  # type: ignore[arg-type]
        hf_tok_s=best("hf_tok_s"),
        hf_seconds=best_seconds("hf_tok_s", "hf_seconds"),
        batch1_switchyard_tok_s=best("batch1_switchyard_tok_s"),
        batch1_hf_tok_s=best("batch1_hf_tok_s"),
        trials=tuple(trials),
    )


def run_command(args: argparse.Namespace) -> int:
    """`switchyard bench offline`: load the engine from the parsed flags, run the workload, print the rates."""
    if args.threads:
        torch.set_num_threads(args.threads)
    config = replace(engine_config_from_args(args), skip_tokenizer=True)
    llm = LLM(config=config)
    workload = OfflineWorkload(args.num_prompts, args.input_len, args.output_len, args.prefix_len, args.seed)
    result = run_offline(
        llm,
        workload,
        baseline=args.baseline,
        hf_batch_size=args.hf_batch_size,
        decode_len=args.decode_len,
        repeats=args.repeats,
    )
    print(
        f"{workload.num_prompts} requests x ({workload.prefix_len} prefix + {workload.input_len} prompt + "
        f"{workload.output_len} output tokens), dtype {llm.engine.dtype}, best of {args.repeats}"
    )
    print(f"switchyard: {result.switchyard_tok_s:.1f} output tok/s ({result.switchyard_seconds:.1f} s)")
    if result.hf_tok_s:
        print(f"transformers generate, batches of {args.hf_batch_size}: {result.hf_tok_s:.1f} output tok/s "
              f"({result.hf_seconds:.1f} s)")  # fmt: skip
        print(f"throughput ratio: {result.throughput_ratio:.2f}x")
    if result.batch1_switchyard_tok_s:
        line = f"batch-1 decode: switchyard {result.batch1_switchyard_tok_s:.1f} tok/s"
        if result.batch1_hf_tok_s:
            line += f", transformers {result.batch1_hf_tok_s:.1f} tok/s, ratio {result.batch1_ratio:.2f}x"
        print(line)
    if args.json:
        record = {"workload": asdict(workload), "model": args.model, "dtype": str(llm.engine.dtype),
                  **result.to_json()}  # fmt: skip
        args.json.write_text(json.dumps(record, indent=2))
    return 0
