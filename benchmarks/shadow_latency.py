"""Shadow traffic and the caller's latency: a gateway copying every request to a candidate pool against the same
gateway without the copy, same replica, same run.

Two gateways (`switchyard fleet serve`) in front of one primary replica (`switchyard serve` on a tiny random Llama,
or --model); the second also copies every request (share 1.0) to a candidate replica, as
`[pools.NAME] shadow = { pool = "candidate", share = 1.0 }` does. In production the candidate runs on its own
hardware, so here it is pinned to the last CPU and everything else to the others (Linux `taskset`; without it, the
two share the cores and the copy's compute shows up as contention, not as gateway cost). One streamed request at a
time, alternating between the gateways so drift in the machine's load hits both alike. Reported: each path's time
to first token and total latency (p50, p90), and the difference of medians with a bootstrap 95% interval: an
interval that contains 0 (or one within noise of it) is "no change beyond noise".

Usage: python benchmarks/shadow_latency.py [--requests N] [--model M] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from fleet_overhead import free_port, start, tiny_model  # noqa: E402

SERVED = "bench"
CANDIDATE = "candidate"


def pinned(command: list[str], cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus, *command] if cpus and shutil.which("taskset") else command


def streamed(client: httpx.Client, max_tokens: int) -> tuple[float, float]:
    """(time to first token, total) in seconds for one streamed chat request."""
    body = {
        "model": SERVED,
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "temperature": 0,
    }
    started = time.perf_counter()
    first = None
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and '"content"' in line:
                first = time.perf_counter() - started
    total = time.perf_counter() - started
    return (first if first is not None else total), total


def median_difference(a: list[float], b: list[float], draws: int = 2000) -> tuple[float, float, float]:
    """median(b) - median(a) in ms, and a bootstrap 95% interval of it (paired by position: interleaved runs)."""
    pairs = list(zip(a, b, strict=True))
    rng = random.Random(0)
    estimates = []
    for _ in range(draws):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        estimates.append(statistics.median(y for _, y in sample) - statistics.median(x for x, _ in sample))
    estimates.sort()
    point = statistics.median(b) - statistics.median(a)
    return 1000 * point, 1000 * estimates[int(0.025 * draws)], 1000 * estimates[int(0.975 * draws)]


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p90_ms": 1000 * ordered[int(0.9 * (len(ordered) - 1))],
    }


def serve_command(model: str, port: int, name: str) -> list[str]:
    return [
        sys.executable, "-m", "switchyard.cli", "serve", model, "--port", str(port),
        "--served-model-name", name, "--device", "cpu", "--dtype", "float32",
        "--max-model-len", "256", "--kv-cache-memory", str(8 << 20),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per path (200)")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured requests per path first (10)")
    parser.add_argument("--max-tokens", type=int, default=16, help="output tokens per request (16)")
    parser.add_argument("--model", default=None, help="model folder or bundled name (default: a tiny Llama)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    cpus = os.cpu_count() or 1
    primary_cpus = f"0-{cpus - 2}" if cpus > 1 else None
    candidate_cpus = str(cpus - 1) if cpus > 1 else None
    with tempfile.TemporaryDirectory() as workdir:
        model = args.model or str(tiny_model(Path(workdir) / "tiny-llama"))
        ports = {name: free_port() for name in ("primary", "candidate", "plain", "shadowed")}
        url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        config = Path(workdir) / "fleet.toml"
        config.write_text(
            f'[pools.{SERVED}]\nworkers = ["{url["primary"]}"]\n'
            f'shadow = {{ pool = "{CANDIDATE}", share = 1.0 }}\n\n'
            f'[pools.{CANDIDATE}]\nworkers = ["{url["candidate"]}"]\n'
        )
        fleet = [sys.executable, "-m", "switchyard.cli", "fleet", "serve"]
        processes = []
        try:
            processes.append(start(pinned(serve_command(model, ports["primary"], SERVED), primary_cpus),
                                   f"{url['primary']}/health"))  # fmt: skip
            processes.append(start(pinned(serve_command(model, ports["candidate"], CANDIDATE), candidate_cpus),
                                   f"{url['candidate']}/health"))  # fmt: skip
            plain = [*fleet, "--worker", f"{url['primary']}@{SERVED}", "--port", str(ports["plain"])]
            shadowed = [*fleet, "--config", str(config), "--port", str(ports["shadowed"])]
            processes.append(start(pinned(plain, primary_cpus), f"{url['plain']}/health"))
            processes.append(start(pinned(shadowed, primary_cpus), f"{url['shadowed']}/health"))
            timings: dict[str, dict[str, list[float]]] = {
                path: {"ttft": [], "total": []} for path in ("plain", "shadowed")
            }
            with (
                httpx.Client(base_url=url["plain"], timeout=60) as without,
                httpx.Client(base_url=url["shadowed"], timeout=60) as with_copy,
            ):
                for _ in range(args.warmup):
                    streamed(without, args.max_tokens)
                    streamed(with_copy, args.max_tokens)
                for index in range(args.requests):
                    # alternate which goes first, so neither always follows the other's copy
                    order = [("plain", without), ("shadowed", with_copy)]
                    for path, client in order if index % 2 == 0 else order[::-1]:
                        first, total = streamed(client, args.max_tokens)
                        timings[path]["ttft"].append(first)
                        timings[path]["total"].append(total)
                copied = httpx.get(f"{url['candidate']}/metrics", timeout=10).text
        finally:
            for process in reversed(processes):
                process.terminate()
                process.wait(timeout=60)
    results: dict[str, object] = {
        path: {measure: percentiles(values) for measure, values in by_measure.items()}
        for path, by_measure in timings.items()
    }
    for measure in ("ttft", "total"):
        point, low, high = median_difference(timings["plain"][measure], timings["shadowed"][measure])
        results[f"{measure}_median_difference_ms"] = {"value": point, "ci95": [low, high]}
        print(
            f"{measure:5}  plain p50 {results['plain'][measure]['p50_ms']:7.2f} ms"  # type: ignore[index]
            f"  shadowed p50 {results['shadowed'][measure]['p50_ms']:7.2f} ms"  # type: ignore[index]
            f"  difference {point:+.2f} ms (95% CI {low:+.2f} .. {high:+.2f})"
        )
    results["candidate_requests"] = sum(
        float(line.rsplit(" ", 1)[1])
        for line in copied.splitlines()
        if line.startswith("switchyard:request_success_total{")
    )
    print(f"the candidate answered {results['candidate_requests']:.0f} copies")
    results["setup"] = {
        "requests_per_path": args.requests,
        "max_tokens": args.max_tokens,
        "model": args.model or "tiny random Llama",
        "pinning": f"primary and gateways on CPUs {primary_cpus}, candidate on {candidate_cpus}"
        if primary_cpus and shutil.which("taskset")
        else "none",
    }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
