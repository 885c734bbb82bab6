"""Gateway overhead: the latency `switchyard fleet serve` adds to a request, against the replica direct, same run.

One replica (`switchyard serve` on a tiny random Llama, or --model) and one gateway in front of it
(`switchyard fleet serve --worker URL@bench`), both real processes on loopback. Unloaded: one request at a time,
a 1-token completion (`max_tokens=1`), alternating direct and through the gateway so drift in the machine's
load hits both alike, each path on its own keep-alive connection. Reported: p50 and p90 of each path and the
p50 the gateway adds (its proxying, routing and accounting, plus one more loopback hop).

Usage: python benchmarks/fleet_overhead.py [--requests N] [--model M] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVED = "bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tiny_model(folder: Path) -> Path:
    """The tests' tiny Llama with its trained 320-token tokenizer (reused when already built)."""
    if not (folder / "config.json").is_file():
        sys.path.insert(0, str(ROOT / "tests"))
        from model_factory import build_hf_model
        from tokenizer_factory import build_tokenizer

        build_hf_model("llama", folder, seed=0)
        build_tokenizer(folder, vocab_size=320)
    return folder


def start(
    command: list[str],
    health_url: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 180.0,
) -> subprocess.Popen[bytes]:
    """Start `command` (with this checkout first on PYTHONPATH unless `env` says otherwise); return once
    `health_url` answers 200, RuntimeError with its stderr if it exits first or never does."""
    if env is None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(health_url, timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"{' '.join(command[1:5])} exited: {stderr}")
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{' '.join(command[1:5])} did not become healthy in {timeout:.0f} s")


def one_request(client: httpx.Client) -> float:
    body = {"model": SERVED, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    started = time.perf_counter()
    response = client.post("/v1/completions", json=body)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p90_ms": 1000 * ordered[int(0.9 * (len(ordered) - 1))],
        "mean_ms": 1000 * statistics.fmean(ordered),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per path (300)")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured requests per path first (20)")
    parser.add_argument("--model", default=None, help="model folder or bundled name (default: a tiny Llama)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as workdir:
        model = args.model or str(tiny_model(Path(workdir) / "tiny-llama"))
        replica_port, gateway_port = free_port(), free_port()
        replica_url, gateway_url = f"http://127.0.0.1:{replica_port}", f"http://127.0.0.1:{gateway_port}"
        serve = [sys.executable, "-m", "switchyard.cli", "serve", model, "--port", str(replica_port)]
        serve += [
            "--served-model-name",
            SERVED,
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--max-model-len",
            "256",
        ]
        serve += ["--kv-cache-memory", str(8 << 20)]
        gateway = [
            sys.executable,
            "-m",
            "switchyard.cli",
            "fleet",
            "serve",
            "--worker",
            f"{replica_url}@{SERVED}",
        ]
        gateway += ["--port", str(gateway_port)]
        processes = [start(serve, f"{replica_url}/health")]
        try:
            processes.append(start(gateway, f"{gateway_url}/health"))
            with httpx.Client(base_url=replica_url) as direct, httpx.Client(base_url=gateway_url) as proxied:
                for _ in range(args.warmup):
                    one_request(direct)
                    one_request(proxied)
                timings: dict[str, list[float]] = {"direct": [], "gateway": []}
                for _ in range(args.requests):
                    timings["direct"].append(one_request(direct))
                    timings["gateway"].append(one_request(proxied))
        finally:
            for process in reversed(processes):
                process.terminate()
                process.wait(timeout=60)
    results = {name: summary(seconds) for name, seconds in timings.items()}
    results["added_p50_ms"] = {"value": results["gateway"]["p50_ms"] - results["direct"]["p50_ms"]}
    results["setup"] = {"requests_per_path": args.requests, "model": args.model or "tiny random Llama"}  # type: ignore[dict-item]
    for name in ("direct", "gateway"):
        row = results[name]
        print(
            f"{name:8} p50 {row['p50_ms']:7.2f} ms   p90 {row['p90_ms']:7.2f} ms   mean {row['mean_ms']:7.2f} ms"
        )
    print(f"the gateway adds {results['added_p50_ms']['value']:.2f} ms at p50")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
