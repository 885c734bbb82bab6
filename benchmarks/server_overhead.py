"""Server benchmark (issue: OpenAI-compatible server), ratios against the offline engine in the same run.

1. The same workload (64 requests, 128-token prompts, 64 output tokens, ignore_eos, all at once) through
   `LLM.generate` and through `switchyard serve` with 64 concurrent streaming clients (the official `openai`
   client over loopback): throughput ratio and the p50 TTFT the server adds.
2. 256 concurrent streaming clients: every stream completes, errors by type, TTFT p50/p99, tokens/s.

The model is random-initialised (the small Llama shape in shapes.py) unless --model names one (a folder, or
`switchyard-chat` for the bundled model). Prompts are random token ids sent to /v1/completions, so tokenization
does not differ between the two paths; with --model they are drawn from its tokenizer's ids, special tokens
left out.
Usage: python benchmarks/server_overhead.py [--model M] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import torch

sys.path.insert(0, str(Path(__file__).parent))
from shapes import SMALL, build_qwen2

from switchyard import LLM, SamplingParams
from switchyard.models.registry import resolve_model

ENGINE_ARGS = [
    "--served-model-name",
    "bench",
    "--dtype",
    "bfloat16",
    "--max-model-len",
    "1024",
    "--kv-cache-memory",
    str(1 << 30),
]


# The small shape with the test tokenizer's 320-token vocabulary, so every generated id decodes to text and
# streamed chunks match tokens one to one.
SHAPE = {**SMALL, "vocab_size": 320}


def random_ids(count: int, length: int, seed: int, ids: list[int] | None = None) -> list[list[int]]:
    """Prompts drawn from `ids` (default: the small shape's ordinary ids), so no special token ends or shapes a
    turn."""
    pool = torch.tensor(ids if ids is not None else range(3, SHAPE["vocab_size"]))
    generator = torch.Generator().manual_seed(seed)
    return pool[torch.randint(0, len(pool), (count, length), generator=generator)].tolist()


def ordinary_ids(folder: Path) -> list[int]:
    """Every id of a model folder's tokenizer but its added (special) tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    added = {int(i) for i in tokenizer.added_tokens_decoder}
    return [i for i in range(len(tokenizer)) if i not in added]


def offline(folder: Path, prompts: list[list[int]], max_tokens: int) -> dict[str, float]:
    llm = LLM(str(folder), dtype="bfloat16", skip_tokenizer=True, max_model_len=1024, kv_cache_memory=1 << 30)
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(max_tokens=2), use_tqdm=False)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    ttft = [o.metrics.time_to_first_token for o in outputs if o.metrics and o.metrics.time_to_first_token]
    return {"tok_s": len(prompts) * max_tokens / elapsed, "ttft_p50_s": statistics.median(ttft)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(folder: Path, port: int) -> subprocess.Popen[bytes]:
    # The tokenizer is needed by the server; the random model's folder gets one from the tests' factory.
    command = [
        sys.executable,
        "-m",
        "switchyard.cli",
        "serve",
        str(folder),
        "--port",
        str(port),
        *ENGINE_ARGS,
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy()
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {process.stderr.read().decode() if process.stderr else ''}")
        time.sleep(0.5)
    process.kill()
    raise RuntimeError("server did not become healthy in 120 s")


async def stream_one(
    client: openai.AsyncOpenAI, prompt: list[int], max_tokens: int
) -> tuple[float, int, str]:
    start = time.perf_counter()
    first = None
    tokens = 0
    try:
        stream = await client.completions.create(
            model="bench", prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )  # fmt: skip
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].text:
                first = time.perf_counter()
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
    except openai.APIError as exc:
        return float("nan"), tokens, type(exc).__name__
    return (first or time.perf_counter()) - start, tokens, ""


async def serve_load(port: int, prompts: list[list[int]], max_tokens: int) -> dict[str, object]:
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600,
        http_client=openai.DefaultAsyncHttpxClient(limits=httpx.Limits(max_connections=1024)),
    )  # fmt: skip
    await stream_one(client, prompts[0][:8], 2)
    start = time.perf_counter()
    results = await asyncio.gather(*(stream_one(client, p, max_tokens) for p in prompts))
    elapsed = time.perf_counter() - start
    ttfts = sorted(r[0] for r in results if not r[2])
    errors: dict[str, int] = {}
    for _, _, error in results:
        if error:
            errors[error] = errors.get(error, 0) + 1
    return {
        "clients": len(prompts),
        "completed": len(ttfts),
        "errors": errors,
        "tok_s": sum(r[1] for r in results) / elapsed,
        "ttft_p50_s": statistics.median(ttfts) if ttfts else None,
        "ttft_p99_s": statistics.quantiles(ttfts, n=100)[98] if len(ttfts) > 1 else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="model folder or bundled name (default: random small)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.model is None:
        folder = build_qwen2(args.workdir / "small-320-with-tokenizer", SHAPE)
        if not (folder / "tokenizer.json").is_file():
            sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
            from tokenizer_factory import build_tokenizer

            build_tokenizer(folder, vocab_size=320)
        ids = None
    else:
        folder = resolve_model(args.model)
        ids = ordinary_ids(folder)
    prompts = random_ids(64, 128, seed=0, ids=ids)
    results: dict[str, object] = {"offline": offline(folder, prompts, 64)}
    print(f"offline: {results['offline']}", flush=True)
    port = free_port()
    server = start_server(folder, port)
    try:
        results["server"] = asyncio.run(serve_load(port, prompts, 64))
        print(f"server, 64 clients: {results['server']}", flush=True)
        results["server_256"] = asyncio.run(serve_load(port, random_ids(256, 128, seed=1, ids=ids), 64))
        print(f"server, 256 clients: {results['server_256']}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    served, local = results["server"], results["offline"]
    results["throughput_ratio"] = served["tok_s"] / local["tok_s"]  # type: ignore[index]
    results["added_ttft_p50_s"] = served["ttft_p50_s"] - local["ttft_p50_s"]  # type: ignore[index,operator]
    print(f"server/offline throughput {results['throughput_ratio']:.3f}, added p50 TTFT "
          f"{results['added_ttft_p50_s'] * 1e3:.1f} ms")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
