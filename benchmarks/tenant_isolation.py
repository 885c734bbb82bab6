"""Tenant isolation through the gateway: one tenant floods, another's p99 time to first token against its idle
value, same run.

A gateway (`switchyard fleet serve --replicas 2` on a tiny random Llama, or --model) with tenancy on, both
real processes on loopback; the gateway launches the replicas, so they read the tenants' weights. Two
tenants: `steady` sends one streamed chat request at a time (16 output tokens) and measures the time to its
first token; `flood` runs --flood-threads loops of the same requests with 64 output tokens, as fast as the
gateway lets it, a refused request retried after its Retry-After (as the official client does), from a process
of its own (in the steady client's, the flood's parsing would hold the GIL while steady timed). Three phases,
each --seconds long: steady alone (its idle TTFT), then steady beside the flood with the flood's key limited to
--flood-concurrency requests at a time (and the two tenants at equal fair-share weight), then beside the flood
with no limit on its key. Reported: steady's
p50 and p99 TTFT in each phase and their ratio to idle, and the flood's answered and refused (429) requests.

With --max-in-flight-per-replica small, requests beyond it wait in the gateway's admission queue, whose order
between the tenants is then what steady's TTFT measures.

Usage: python benchmarks/tenant_isolation.py [--seconds S] [--flood-threads N] [--max-in-flight-per-replica N]
    [--model M] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.synchronize
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from fleet_overhead import free_port, start, tiny_model  # noqa: E402

SERVED = "bench"


def switchyard(*argv: str, env: dict[str, str]) -> str:
    command = [sys.executable, "-m", "switchyard.cli", *argv]
    return subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout


def new_key(db: Path, name: str, env: dict[str, str], *limits: str) -> str:
    added = switchyard("tenants", "add", name, "--db", str(db), "--json", *limits, env=env)
    return json.loads(added)["api_key"]


def ttft(client: httpx.Client, max_tokens: int) -> float | str:
    """Seconds to the first token of a streamed chat request, or the Retry-After of the gateway's refusal."""
    body = {
        "model": SERVED,
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    started = time.perf_counter()
    first = None
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            response.read()
            return response.headers.get("retry-after", "0")
        for line in response.iter_lines():
            if first is None and line.startswith("data:") and '"content"' in line:
                first = time.perf_counter() - started
    return first if first is not None else "0"


def steady_ttfts(client: httpx.Client, seconds: float) -> list[float]:
    deadline, found = time.monotonic() + seconds, []
    while time.monotonic() < deadline:
        value = ttft(client, 16)
        if isinstance(value, float):
            found.append(value)
    return found


def flood(url: str, key: str, stop: threading.Event, counts: dict[str, int], lock: threading.Lock) -> None:
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=120) as client:
        while not stop.is_set():
            result = ttft(client, 64)
            with lock:
                counts["answered" if isinstance(result, float) else "refused"] += 1
            if isinstance(result, str):
                stop.wait(float(result))  # as the official client does: retry after the gateway's Retry-After


def flood_process(
    url: str, key: str, threads: int, stop: multiprocessing.synchronize.Event, results: multiprocessing.Queue
) -> None:
    """The flood's loops, in a process of their own: in the steady client's process their parsing would hold
    the GIL and the steady client would time its own wait for it."""
    halt, lock = threading.Event(), threading.Lock()
    counts = {"answered": 0, "refused": 0}
    workers = [
        threading.Thread(target=flood, args=(url, key, halt, counts, lock), daemon=True)
        for _ in range(threads)
    ]
    for worker in workers:
        worker.start()
    stop.wait()
    halt.set()
    for worker in workers:
        worker.join(timeout=120)
    results.put(counts)


def phase(
    url: str, steady_key: str, flood_key: str | None, seconds: float, threads: int
) -> dict[str, object]:
    context = multiprocessing.get_context("fork")
    stop, results = context.Event(), context.Queue()
    counts = {"answered": 0, "refused": 0}
    flooder = None
    if flood_key is not None:
        flooder = context.Process(target=flood_process, args=(url, flood_key, threads, stop, results))
        flooder.start()
        time.sleep(1.0)  # the flood reaches its steady state first
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {steady_key}"}, timeout=120) as client:
        values = steady_ttfts(client, seconds)
    stop.set()
    if flooder is not None:
        counts = results.get(timeout=180)
        flooder.join(timeout=60)
    ordered = sorted(values)
    return {
        "steady_requests": len(ordered),
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "flood_answered": counts["answered"],
        "flood_refused": counts["refused"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="length of each phase (12)")
    parser.add_argument("--flood-threads", type=int, default=12, help="the flooding tenant's loops (12)")
    parser.add_argument("--flood-concurrency", type=int, default=2, help="the limited flood's key (2)")
    parser.add_argument(
        "--max-in-flight-per-replica",
        type=int,
        default=None,
        help="the gateway's per-replica limit (its default: 64); a small one makes requests wait in the gateway",
    )
    parser.add_argument("--model", default=None, help="model folder or bundled name (default: a tiny Llama)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as workdir:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        model = args.model or str(tiny_model(Path(workdir) / "tiny-llama"))
        db = Path(workdir) / "tenants.db"
        steady = new_key(db, "steady", env)
        limited = new_key(db, "flood", env, "--max-concurrent", str(args.flood_concurrency))
        unlimited = new_key(db, "flood-unlimited", env)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        gateway = [sys.executable, "-m", "switchyard.cli", "fleet", "serve", "--replicas", "2", model]
        gateway += [
            "--served-model-name",
            SERVED,
            "--threads",
            "1",
            "--port",
            str(port),
            "--tenants-db",
            str(db),
        ]
        if args.max_in_flight_per_replica is not None:
            gateway += ["--max-in-flight-per-replica", str(args.max_in_flight_per_replica)]
        gateway += ["--policy", "least_load", "--", "--device", "cpu", "--dtype", "float32"]
        gateway += ["--max-model-len", "256", "--kv-cache-memory", str(8 << 20)]
        process = start(gateway, f"{url}/health")
        try:
            results = {
                "idle": phase(url, steady, None, args.seconds, 0),
                "flood_limited": phase(url, steady, limited, args.seconds, args.flood_threads),
                "flood_unlimited": phase(url, steady, unlimited, args.seconds, args.flood_threads),
            }
        finally:
            process.terminate()
            process.wait(timeout=60)
    idle = results["idle"]
    for name, row in results.items():
        ratio = float(row["p99_ms"]) / float(idle["p99_ms"])  # type: ignore[arg-type]
        row["p99_vs_idle"] = ratio
        print(
            f"{name:16} steady p50 {row['p50_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms ({ratio:4.2f}x idle), "
            f"{row['steady_requests']} requests; flood answered {row['flood_answered']}, refused {row['flood_refused']}"
        )
    if args.json:
        args.json.write_text(json.dumps({"setup": vars(args) | {"json": None}, **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
