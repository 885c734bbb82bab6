"""Decode speed against llama.cpp (issue 51): batch-1 ms per decode step and 64 x (256 -> 64) throughput,
Switchyard bf16 / int8 / int4 against llama.cpp's `llama-server` bf16 / q8_0 / q4_0, in one run.

llama.cpp is built from the source vendored in the llama-cpp-python sdist (`pip download llama-cpp-python
--no-binary :all: --no-deps`), with cmake, into a gitignored cache (benchmarks/.llamacpp/) reused by later runs.
The random Qwen2.5-0.5B-shaped model (vocab 8192, `shapes.py`) is converted with the vendored
`convert_hf_to_gguf.py` to a bf16 GGUF and quantized with `llama-quantize` to q8_0 and q4_0. Both servers get
the same token-id prompts through `/v1/completions` (greedy, ignore_eos), one pair at a time, their requests
alternated so that the noise of a shared machine falls on both:
- batch 1: a request for 1 token and one for 1 + N tokens on fresh prompts of the same length (so neither finds
  its prompt cached); (t(1 + N) - t(1)) / N is the decode step;
- throughput: 64 concurrent requests of 256 prompt tokens, 64 output tokens each.

Usage: python benchmarks/llamacpp_decode.py [--pairs bf16,int8,int4] [--threads 2] [--json FILE]
       python benchmarks/llamacpp_decode.py --build-only   (download, build, convert; no timing)
A benchmark, not a test: it needs a compiler, cmake and the registry (once), and minutes of CPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from shapes import (
    QWEN3_06B,
    QWEN3_MOE_SMALL,
    QWEN25_05B,
    add_tokenizer,
    build_qwen2,
    build_random,
)

CACHE = Path(__file__).parent / ".llamacpp"
PAIRS = {"bf16": (None, "bf16"), "int8": ("int8", "q8_0"), "int4": ("int4", "q4_0")}
"""Switchyard's --quantization and the llama.cpp GGUF type compared with it."""


def llama_source(cache: Path) -> Path:
    """The llama.cpp tree vendored in the llama-cpp-python sdist, downloaded and unpacked once."""
    sdists = sorted((cache / "sdist").glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "llama-cpp-python",
                "--no-binary",
                ":all:",
                "--no-deps",
                "-d",
                str(cache / "sdist"),
            ],
            check=True,
        )
        sdists = sorted((cache / "sdist").glob("llama_cpp_python-*.tar.gz"))
    sdist = sdists[-1]
    root = cache / sdist.name.removesuffix(".tar.gz")
    if not root.is_dir():
        with tarfile.open(sdist) as archive:
            archive.extractall(cache, filter="data")
    return root / "vendor" / "llama.cpp"


NO_AMX_FLAGS = [
    "-DGGML_NATIVE=OFF",
    *(f"-DGGML_{flag}=ON" for flag in ("AVX", "AVX2", "FMA", "F16C", "AVX512", "AVX512_VNNI", "AVX512_BF16")),
    *(f"-DGGML_AMX_{kind}=OFF" for kind in ("TILE", "INT8", "BF16")),
]
"""An AVX-512 build without llama.cpp's AMX path: on CPUs with AMX, `-march=native` compiles that path in, and
in this vendored version it crashes (SIGSEGV in ggml_backend_amx_mul_mat) when it takes q8_0 / q4_0 weights;
AVX-512 with VNNI and BF16 is also what the AMD machine of the issue has."""


def build_llama(cache: Path, jobs: int, no_amx: bool = False) -> Path:
    """cmake-build llama-server and llama-quantize (CPU only, -march=native, or AVX-512 without AMX); returns the
    bin folder."""
    source = llama_source(cache)
    build = cache / ("build-no-amx" if no_amx else "build")
    binaries = build / "bin"
    if (binaries / "llama-server").is_file() and (binaries / "llama-quantize").is_file():
        return binaries
    subprocess.run(
        [
            "cmake",
            "-S",
            str(source),
            "-B",
            str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_OPENSSL=OFF",
            *(NO_AMX_FLAGS if no_amx else ["-DGGML_NATIVE=ON"]),
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DBUILD_SHARED_LIBS=OFF",
        ],
        check=True,
    )
    subprocess.run(
        ["cmake", "--build", str(build), "-j", str(jobs), "--target", "llama-server", "llama-quantize"],
        check=True,
    )
    return binaries


def convert(cache: Path, model: Path, binaries: Path) -> dict[str, Path]:
    """bf16 GGUF by the vendored converter, then q8_0 and q4_0 by llama-quantize; each made once."""
    out = cache / "gguf"
    out.mkdir(exist_ok=True)
    files = {kind: out / f"{model.name}-{kind}.gguf" for kind in ("bf16", "q8_0", "q4_0")}
    if not files["bf16"].is_file():
        subprocess.run(
            [sys.executable, __file__, "--convert-worker", str(model), str(files["bf16"])], check=True
        )
    for kind in ("q8_0", "q4_0"):
        if not files[kind].is_file():
            subprocess.run(
                [str(binaries / "llama-quantize"), str(files["bf16"]), str(files[kind]), kind.upper()],
                check=True,
            )
    return files


def convert_worker(model: str, outfile: str) -> int:
    """Run the vendored convert_hf_to_gguf.py on the random model.

    Its tokenizer (the tests' BPE padded with added tokens) is unknown to the converter's table of pre-tokenizer
    hashes, and the Qwen2 converter tries sentencepiece first; the prompts are token ids, so the converter is
    told "qwen2" for the pre-tokenizer and sent straight to its BPE path. The weights are converted untouched.
    """
    source = llama_source(CACHE)
    sys.path.insert(0, str(source))
    sys.argv = ["convert_hf_to_gguf.py", model, "--outtype", "bf16", "--outfile", outfile]
    import convert_hf_to_gguf  # type: ignore[import-not-found]
    from conversion import base, qwen  # type: ignore[import-not-found]

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    qwen.Qwen2Model.set_vocab = lambda self: self._set_vocab_gpt2()
    convert_hf_to_gguf.main()
    return 0


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_switchyard(
    model: Path, quantization: str | None, port: int, threads: int, log: Path, max_num_seqs: int = 64
) -> Server:
    command = [
        sys.executable,
        "-c",
        "import sys; from switchyard.cli import main; sys.exit(main())",
        "serve",
        str(model),
        "--dtype",
        "bfloat16",
        "--port",
        str(port),
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        str(max_num_seqs),
        "--kv-cache-memory",
        str(1 << 30),
    ]
    if quantization:
        command += ["--quantization", quantization]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    return Server(f"switchyard {quantization or 'bf16'}", process, port)


def start_llama(
    binaries: Path, gguf: Path, kind: str, port: int, threads: int, log: Path, repack: bool = True
) -> Server:
    command = [
        str(binaries / "llama-server"),
        "-m",
        str(gguf),
        "--port",
        str(port),
        "-t",
        str(threads),
        "-np",
        "64",
        "-c",
        str(64 * 336),
        "--no-webui",
        *([] if repack else ["--no-repack"]),
    ]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    return Server(f"llama.cpp {kind}", process, port)


def wait_ready(server: Server, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise RuntimeError(f"{server.name} not ready after {timeout:.0f} s")


def complete(server: Server, prompt: list[int], max_tokens: int) -> float:
    """Seconds for one greedy completion of exactly max_tokens tokens."""
    body = {
        "model": "m",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    if server.name.startswith("switchyard"):
        body["model"] = served_model(server)
    request = urllib.request.Request(
        server.url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=1800) as reply:
        answer = json.loads(reply.read())
    elapsed = time.perf_counter() - start
    tokens = answer.get("usage", {}).get("completion_tokens")
    if tokens != max_tokens:
        raise RuntimeError(f"{server.name} returned {tokens} tokens, asked for {max_tokens}")
    return elapsed


_MODEL_NAMES: dict[int, str] = {}


def served_model(server: Server) -> str:
    if server.port not in _MODEL_NAMES:
        with urllib.request.urlopen(server.url + "/v1/models", timeout=30) as reply:
            _MODEL_NAMES[server.port] = json.loads(reply.read())["data"][0]["id"]
    return _MODEL_NAMES[server.port]


def batch1_step_ms(
    servers: list[Server], prompts: list[list[int]], decode: int, reps: int
) -> dict[str, float]:
    """Median (t(1 + decode) - t(1)) / decode per server, the servers' requests alternated."""
    samples: dict[str, list[float]] = {s.name: [] for s in servers}
    for rep in range(reps):
        for server in servers:
            first = complete(server, prompts[2 * rep], 1)
            full = complete(server, prompts[2 * rep + 1], 1 + decode)
            samples[server.name].append((full - first) / decode * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def throughput(server: Server, prompts: list[list[int]], output_len: int) -> float:
    """Output tokens/s of all prompts sent at once."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        list(pool.map(lambda p: complete(server, p, output_len), prompts))
    return len(prompts) * output_len / (time.perf_counter() - start)


def random_prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    import random

    generator = random.Random(seed)
    return [[generator.randrange(100, vocab - 100) for _ in range(length)] for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/switchyard-bench"))
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument(
        "--shape",
        choices=("qwen25_05b", "qwen3_06b", "qwen3_moe_small"),
        default="qwen25_05b",
        help="the random model: Qwen2.5-0.5B's or Qwen3-0.6B's body, or a small Qwen3-MoE (shapes.py)",
    )
    parser.add_argument("--pairs", default="bf16,int8,int4")
    parser.add_argument("--threads", type=int, default=2, help="compute threads of each server")
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs for the llama.cpp build")
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--decode", type=int, default=32, help="decode steps timed per batch-1 sample")
    parser.add_argument("--reps", type=int, default=5, help="batch-1 samples per server")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=64,
        help="Switchyard's batch size; 8 or fewer is its latency-tuned configuration (native bf16 decode kernel)",
    )
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument(
        "--no-amx",
        action="store_true",
        help="build and run llama.cpp for AVX-512 without its AMX path (which crashes on q8_0 / q4_0 here)",
    )
    parser.add_argument("--convert-worker", nargs=2, metavar=("MODEL", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.convert_worker:
        return convert_worker(*args.convert_worker)
    if shutil.which("cmake") is None:
        parser.error("cmake is needed to build llama.cpp")

    CACHE.mkdir(exist_ok=True)
    if args.shape == "qwen3_moe_small":
        shape = {**QWEN3_MOE_SMALL, "vocab_size": args.vocab_size}
        folder = build_random(args.workdir / f"qwen3-moe-small-v{args.vocab_size}", "qwen3_moe", shape)
    elif args.shape == "qwen3_06b":
        shape = {**QWEN3_06B, "vocab_size": args.vocab_size}
        folder = build_random(args.workdir / f"qwen3-0.6b-shape-v{args.vocab_size}", "qwen3", shape)
    else:
        shape = {**QWEN25_05B, "vocab_size": args.vocab_size}
        folder = build_qwen2(args.workdir / f"qwen2.5-0.5b-shape-v{args.vocab_size}", shape)
    model = add_tokenizer(folder, args.vocab_size)
    binaries = build_llama(CACHE, args.jobs, args.no_amx)
    ggufs = convert(CACHE, model, binaries)
    if args.build_only:
        print(json.dumps({k: str(v) for k, v in ggufs.items()}, indent=2))
        return 0

    results: dict[str, object] = {
        "shape": args.shape,
        "threads": args.threads,
        "max_num_seqs": args.max_num_seqs,
        "llama_cpp_build": "avx512-no-amx" if args.no_amx else "native",
        "pairs": {},
    }
    count = 2 * args.reps
    batch1_prompts = random_prompts(count * 2, args.prompt_len, args.vocab_size, seed=1)
    load_prompts = random_prompts(args.requests, args.prompt_len, args.vocab_size, seed=2)
    logs = args.workdir / "llamacpp-decode-logs"
    logs.mkdir(parents=True, exist_ok=True)
    for pair in args.pairs.split(","):
        quantization, kind = PAIRS[pair]
        ours = start_switchyard(
            model, quantization, 18301, args.threads, logs / f"switchyard-{pair}.log", args.max_num_seqs
        )
        theirs = start_llama(binaries, ggufs[kind], kind, 18302, args.threads, logs / f"llama-{kind}.log")
        repacked = True
        try:
            wait_ready(ours)
            try:
                wait_ready(theirs)
            except RuntimeError as crash:
                # Some llama.cpp builds crash while repacking q8_0 / q4_0 weights into their interleaved CPU
                # layout (a segfault at load on AVX-512 machines); without the repack they run, slower.
                print(f"{crash}; restarting it with --no-repack", flush=True)
                repacked = False
                theirs = start_llama(
                    binaries, ggufs[kind], kind, 18302, args.threads, logs / f"llama-{kind}.log", repack=False
                )
                wait_ready(theirs)
            servers = [ours, theirs]
            for server in servers:  # warm-up
                complete(server, batch1_prompts[-1], 4)
            # Each server gets its own fresh prompts (no prefix-cache hits), the same ones on both sides.
            step = batch1_step_ms(servers, batch1_prompts, args.decode, args.reps)
            entry: dict[str, object] = {
                "batch1_ms_per_step": step,
                "batch1_speedup": step[theirs.name] / step[ours.name],
                "llama_cpp_weight_repack": repacked,
            }
            if not args.skip_throughput:
                rates = {s.name: throughput(s, load_prompts, args.output_len) for s in servers}
                entry["throughput_tok_s"] = rates
                entry["throughput_ratio"] = rates[ours.name] / rates[theirs.name]
            print(f"{pair} vs {kind}: {json.dumps(entry)}", flush=True)
            results["pairs"][pair] = entry  # type: ignore[index]
        finally:
            ours.stop()
            theirs.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
