"""GPU benchmarks (issue 52): fractions of this GPU's measured peaks and ratios to transformers, one run.

1. Peaks: HBM copy bandwidth (bytes read + written per second) and the bf16 matmul rate, measured here.
2. Batch-1 decode on a Llama-3-8B-shaped random model: weight bytes read per step x decode steps/s, as a
   fraction of the copy bandwidth (target >= 0.70).
3. Prefill of 64 x 2048 tokens on the same model: model FLOPs per second as a fraction of the matmul rate
   (target >= 0.50).
4. 256 requests x (1024 in -> 256 out) on a Qwen2.5-0.5B-shaped model: Switchyard vs transformers `generate`
   in static batches (target >= 10x); plus batch-1 decode with CUDA graphs vs --enforce-eager.

Models are random-initialised and written as safetensors straight from the GPU (no hub, no transformers
init of 8B parameters on the CPU). Writes gpu_bench.json to --out. Budget: ~5 minutes on an H200.
Usage: python benchmarks/gpu_bench.py --out benchmarks/results/gpu [--workdir DIR] [--skip-8b] [--throughput-8b]
`--device cpu --tiny` runs every section on tiny shapes, to check the script itself without a GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))
from shapes import QWEN25_05B, TINY

from switchyard import LLM, SamplingParams
from switchyard.bench.offline import random_prompts, switchyard_decode_rate, switchyard_throughput

LLAMA3_8B = dict(
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=8192,
    rope_theta=500000.0,
    tie_word_embeddings=False,
)
SHARD_BYTES = 4 << 30


def build_random_folder(folder: Path, config: transformers.PretrainedConfig, device: torch.device) -> Path:
    """config.json and random bf16 safetensors shards, parameter names and shapes from transformers' model
    built on the meta device (so nothing of its size is initialised on the CPU)."""
    if (folder / "config.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):
        skeleton = transformers.AutoModelForCausalLM.from_config(config)
    generator = torch.Generator(device=device).manual_seed(0)
    shard: dict[str, torch.Tensor] = {}
    weight_map: dict[str, str] = {}
    size, index, total = 0, 0, 0
    for name, param in skeleton.state_dict().items():
        if config.tie_word_embeddings and name == "lm_head.weight":
            continue
        if name.endswith("norm.weight"):
            tensor = torch.ones(param.shape, dtype=torch.bfloat16, device=device)
        else:
            tensor = torch.empty(param.shape, dtype=torch.bfloat16, device=device).normal_(
                0, 0.02, generator=generator
            )
        shard[name] = tensor.cpu()
        weight_map[name] = f"model-{index:05d}.safetensors"
        size += tensor.numel() * 2
        if size >= SHARD_BYTES:
            save_file(shard, str(folder / weight_map[name]), metadata={"format": "pt"})
            total += size
            shard, size, index = {}, 0, index + 1
    if shard:
        save_file(shard, str(folder / f"model-{index:05d}.safetensors"), metadata={"format": "pt"})
        total += size
    index_file = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index_file))
    config.dtype = "bfloat16"
    config.save_pretrained(folder)
    return folder


def release(device: torch.device) -> None:
    """Free what dropped engines and models held before the next one sizes its KV cache."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


def measure_peaks(device: torch.device, tiny: bool) -> dict[str, float]:
    """Copy bandwidth (read + write bytes/s) over a buffer far larger than L2, and the bf16 matmul rate."""
    elements = (1 << 20) if tiny else (2 << 30) // 2
    src = torch.empty(elements, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    copy = best_seconds(lambda: dst.copy_(src), device, 10)
    n = 256 if tiny else 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    matmul = best_seconds(lambda: a @ b, device, 10)
    return {"copy_bytes_per_s": 2 * elements * 2 / copy, "bf16_matmul_flops_per_s": 2 * n**3 / matmul}


def weight_bytes_per_decode_step(config: dict[str, Any]) -> int:
    """bf16 bytes a decode step reads: every projection and the LM head (the embedding is a row lookup)."""
    h, i, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head_dim = h // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    per_layer = h * (h + 2 * kv) + h * h + 3 * h * i + 2 * h
    return 2 * (layers * per_layer + config["vocab_size"] * h + h)


def prefill_flops(config: dict[str, Any], seq_len: int, num_seqs: int) -> float:
    """Matmul FLOPs of prefilling num_seqs prompts of seq_len: projections for every token, causal attention
    (QK^T and PV over half the square), one LM head row per prompt."""
    h, i, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head_dim = h // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    projections = 2 * layers * (h * (h + 2 * kv) + h * h + 3 * h * i)
    attention = 2 * 2 * layers * h * seq_len * (seq_len + 1) / 2
    return num_seqs * (seq_len * projections + attention + 2 * h * config["vocab_size"])


def engine(folder: Path, device: torch.device, **overrides: Any) -> LLM:
    settings: dict[str, Any] = dict(dtype="bfloat16", device=str(device), skip_tokenizer=True, seed=0)
    settings.update(overrides)
    return LLM(model=str(folder), **settings)


def bench_llama8b(workdir: Path, device: torch.device, peaks: dict[str, float], tiny: bool) -> dict[str, Any]:
    shape = dict(TINY, num_hidden_layers=2) if tiny else LLAMA3_8B
    folder = build_random_folder(
        workdir / ("llama-tiny" if tiny else "llama3-8b"), transformers.LlamaConfig(**shape), device
    )
    prompt_len, seqs = (64, 4) if tiny else (2048, 64)
    # A fixed KV cache (not 90% of the GPU): the prefill's 64 x 2048 tokens fit with room to spare.
    llm = engine(
        folder,
        device,
        max_model_len=prompt_len + 256,
        max_num_batched_tokens=4 * prompt_len,
        max_num_seqs=64,
        kv_cache_memory=(1 << 20) if tiny else (24 << 30),
    )
    vocab = shape["vocab_size"]
    decode_len = 32 if tiny else 256
    switchyard_decode_rate(llm, random_prompts(1, 128, vocab, seed=1)[0], 8)  # warm-up
    rate = switchyard_decode_rate(llm, random_prompts(1, 128, vocab, seed=2)[0], decode_len)
    step_bytes = weight_bytes_per_decode_step(shape)
    prompts = random_prompts(seqs, prompt_len, vocab, seed=3)
    llm.reset_prefix_cache()
    llm.generate(prompts[:2], SamplingParams(max_tokens=1), use_tqdm=False)
    llm.reset_prefix_cache()
    synchronize(device)
    start = time.perf_counter()
    llm.generate(prompts, SamplingParams(max_tokens=1), use_tqdm=False)
    synchronize(device)
    prefill_s = time.perf_counter() - start
    flops = prefill_flops(shape, prompt_len, seqs)
    return {
        "shape": "tiny" if tiny else "Llama-3-8B",
        "batch1_decode_tokens_per_s": rate,
        "weight_bytes_per_step": step_bytes,
        "batch1_bandwidth_fraction": rate * step_bytes / peaks["copy_bytes_per_s"],
        "batch1_target": 0.70,
        "prefill": f"{seqs} x {prompt_len}",
        "prefill_seconds": prefill_s,
        "prefill_flops_per_s": flops / prefill_s,
        "prefill_mfu": flops / prefill_s / peaks["bf16_matmul_flops_per_s"],
        "prefill_target": 0.50,
    }


def hf_generate_rate(
    folder: Path, prompts: list[list[int]], output_len: int, batch: int, device: torch.device
) -> float:
    """transformers `generate` output tokens/s over static batches of equal-length prompts (its default
    attention, bf16, KV cache on)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(device).eval()
    kwargs: dict[str, Any] = dict(do_sample=False, pad_token_id=0, min_new_tokens=output_len)
    with torch.inference_mode():
        model.generate(
            torch.tensor(prompts[:2], device=device), max_new_tokens=4, **{**kwargs, "min_new_tokens": 4}
        )
        synchronize(device)
        start = time.perf_counter()
        for i in range(0, len(prompts), batch):
            ids = torch.tensor(prompts[i : i + batch], device=device)
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=output_len, **kwargs
            )
            if out.shape[1] != ids.shape[1] + output_len:
                raise RuntimeError("transformers stopped before output_len")
        synchronize(device)
        elapsed = time.perf_counter() - start
    del model
    release(device)
    return len(prompts) * output_len / elapsed


def bench_throughput(workdir: Path, device: torch.device, tiny: bool, family: str = "qwen") -> dict[str, Any]:
    """256 x (1024 -> 256) against transformers, then batch-1 decode with and without CUDA graphs. family
    "qwen" is the Qwen2.5-0.5B shape; "llama" the Llama-3-8B one (opt-in: loads 16 GB twice more)."""
    if family == "qwen":
        shape, config_type, name = (TINY if tiny else QWEN25_05B), transformers.Qwen2Config, "qwen2.5-0.5b"
    else:
        shape, config_type, name = (TINY if tiny else LLAMA3_8B), transformers.LlamaConfig, "llama3-8b"
    folder = build_random_folder(workdir / (f"{family}-tiny" if tiny else name), config_type(**shape), device)
    count, prompt_len, output_len, hf_batch = (8, 32, 8, 4) if tiny else (256, 1024, 256, 64)
    prompts = random_prompts(count, prompt_len, shape["vocab_size"], seed=4)
    hf_rate = hf_generate_rate(folder, prompts, output_len, hf_batch, device)
    # 256 x 1280 tokens: 12 KiB each for the 0.5B shape (3.8 GB), 128 KiB for the 8B one (40 GB).
    kv_bytes = (4 << 20) if tiny else (8 << 30) if family == "qwen" else (44 << 30)
    llm = engine(
        folder, device, max_model_len=prompt_len + output_len, max_num_seqs=256, kv_cache_memory=kv_bytes
    )
    rate, seconds = switchyard_throughput(llm, prompts, output_len)
    graphs = llm.engine.runner.graphs
    decode = switchyard_decode_rate(llm, prompts[0][: prompt_len // 8], output_len)
    del llm
    release(device)
    eager = engine(
        folder,
        device,
        max_model_len=prompt_len + output_len,
        max_num_seqs=256,
        kv_cache_memory=kv_bytes,
        enforce_eager=True,
    )
    decode_eager = switchyard_decode_rate(eager, prompts[0][: prompt_len // 8], output_len)
    return {
        "shape": "tiny" if tiny else name,
        "workload": f"{count} x ({prompt_len} -> {output_len})",
        "switchyard_tokens_per_s": rate,
        "switchyard_seconds": seconds,
        "transformers_tokens_per_s": hf_rate,
        "transformers_batch": hf_batch,
        "speedup": rate / hf_rate,
        "speedup_target": 10.0,
        "cuda_graphs": graphs is not None,
        "batch1_decode_tokens_per_s": decode,
        "batch1_decode_eager_tokens_per_s": decode_eager,
        "graph_speedup_batch1": decode / decode_eager,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu"))
    parser.add_argument("--workdir", type=Path, default=None, help="where random model folders are written")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: check the script, measure nothing")
    parser.add_argument("--skip-8b", action="store_true", help="only the Qwen2.5-0.5B section")
    parser.add_argument(
        "--throughput-8b",
        action="store_true",
        help="also 256 x (1024 -> 256) vs transformers on the Llama-3-8B shape (about 3 more minutes)",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "command": " ".join(sys.argv),
    }
    try:
        import triton

        results["triton"] = triton.__version__
    except ImportError:
        results["triton"] = None
    results["peaks"] = measure_peaks(device, args.tiny)
    print(json.dumps(results["peaks"]), flush=True)
    sections: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("qwen05b", lambda: bench_throughput(workdir, device, args.tiny))
    ]
    if not args.skip_8b:
        sections.append(("llama8b", lambda: bench_llama8b(workdir, device, results["peaks"], args.tiny)))
    if args.throughput_8b:
        sections.append(("llama8b_throughput", lambda: bench_throughput(workdir, device, args.tiny, "llama")))
    for name, run in sections:
        start = time.perf_counter()
        try:
            results[name] = run()
        except Exception as exc:  # one failing section must not lose the others' numbers
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["wall_seconds"] = time.perf_counter() - start
        release(device)
        print(name, json.dumps(results[name]), flush=True)
        (args.out / "gpu_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
