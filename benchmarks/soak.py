"""Soak benchmark (issue 55): `switchyard serve` under many clients for a long time, with disconnects and bad input.

Starts the server as its own process (the bundled model unless --model names a folder), runs
switchyard.bench.soak's clients against it (streams read to the end, streams dropped after a few chunks, replies
given up on, completions, hostile input), samples the server's RSS and KV usage every second, and at the end
checks what a reliable server must show: no 5xx, every bad request a 4xx, and, once idle, no KV block in use.
Writes the samples and verdict as JSON and plots RSS and KV usage over time.

The full run is 30 minutes with 1,000 clients:
    python benchmarks/soak.py --clients 1000 --duration 1800
A short one (as in BENCHMARKS.md):
    python benchmarks/soak.py --clients 100 --duration 90
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from switchyard.bench.soak import SoakConfig, run_soak
from switchyard.models.registry import resolve_model

RESULTS = Path(__file__).parent / "results" / "soak"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(model: str, port: int, max_waiting: int) -> subprocess.Popen[bytes]:
    command = [
        *(sys.executable, "-m", "switchyard.cli", "serve", str(resolve_model(model)), "--port", str(port)),
        *("--served-model-name", "soak", "--max-waiting", str(max_waiting)),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None:
            raise RuntimeError("the server exited while starting")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("the server did not come up")
        time.sleep(0.2)


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else float("nan")


class Sampler(threading.Thread):
    """Every `interval` seconds: the server's RSS, its KV usage and its running/waiting requests."""

    def __init__(self, pid: int, base_url: str, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.base_url = base_url
        self.interval = interval
        self.samples: list[dict[str, float]] = []
        self.stop_event = threading.Event()
        self.start_time = time.monotonic()

    def run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=10) as http:
            while not self.stop_event.wait(self.interval):
                sample = {
                    "t": time.monotonic() - self.start_time,
                    "rss_mib": self.process.memory_info().rss / 2**20,
                }
                try:
                    text = http.get("/metrics").text
                    sample["kv_usage"] = metric(text, "switchyard:kv_cache_usage_perc")
                    sample["running"] = metric(text, "switchyard:num_requests_running")
                    sample["waiting"] = metric(text, "switchyard:num_requests_waiting")
                except httpx.TransportError:
                    pass
                self.samples.append(sample)


def blocks_in_use_when_idle(base_url: str) -> float:
    """KV usage after one small request: its step reports the cache once every soak request is gone."""
    with httpx.Client(base_url=base_url, timeout=60) as http:
        deadline = time.monotonic() + 60
        while True:
            text = http.get("/metrics").text
            idle = metric(text, "switchyard:num_requests_running") + metric(
                text, "switchyard:num_requests_waiting"
            )
            if idle == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        probe = http.post("/v1/completions", json={"model": "soak", "prompt": "probe", "max_tokens": 1})
        probe.raise_for_status()
        return metric(http.get("/metrics").text, "switchyard:kv_cache_usage_perc")


def plot(samples: list[dict[str, float]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, rss_axis = plt.subplots(figsize=(9, 4))
    times = [s["t"] for s in samples]
    rss_axis.plot(times, [s["rss_mib"] for s in samples], color="tab:blue", label="server RSS (MiB)")
    rss_axis.set_xlabel("seconds")
    rss_axis.set_ylabel("RSS (MiB)", color="tab:blue")
    rss_axis.set_ylim(bottom=0)
    kv_axis = rss_axis.twinx()
    kv_axis.plot(times, [s.get("kv_usage", float("nan")) for s in samples], color="tab:orange", alpha=0.6)
    kv_axis.set_ylabel("KV cache in use (0-1)", color="tab:orange")
    kv_axis.set_ylim(0, 1)
    rss_axis.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="switchyard-chat")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-waiting", type=int, default=512)
    parser.add_argument("--name", default=None, help="file stem under benchmarks/results/soak/")
    args = parser.parse_args()
    name = args.name or f"soak_{args.clients}c_{int(args.duration)}s"
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    server = start_server(args.model, port, args.max_waiting)
    try:
        sampler = Sampler(server.pid, base_url)
        sampler.start()
        config = SoakConfig(
            base_url=base_url,
            model="soak",
            clients=args.clients,
            duration=args.duration,
            max_tokens=args.max_tokens,
        )
        result = asyncio.run(run_soak(config))
        time.sleep(2)
        sampler.stop_event.set()
        sampler.join()
        kv_idle = blocks_in_use_when_idle(base_url)
        final_rss = psutil.Process(server.pid).memory_info().rss / 2**20
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    samples = sampler.samples
    rss = [s["rss_mib"] for s in samples]
    report = {
        "config": {
            k: getattr(args, k) for k in ("model", "clients", "duration", "max_tokens", "max_waiting")
        },
        "requests": result.requests,
        "seconds": round(result.seconds, 1),
        "outcomes": dict(sorted(result.outcomes.items())),
        "server_errors": result.num_server_errors,
        "bad_accepted": result.num_bad_accepted,
        "first_errors": result.server_errors,
        "kv_usage_when_idle": kv_idle,
        "rss_mib": {
            "first": round(rss[0], 1) if rss else None,
            "peak": round(max(rss), 1) if rss else None,
            "last_quarter_growth": round(rss[-1] - rss[len(rss) * 3 // 4], 1) if rss else None,
            "final": round(final_rss, 1),
        },
        "samples": samples,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1))
    plot(
        samples,
        f"soak: {args.clients} clients, {args.duration:g} s ({result.requests} requests)",
        RESULTS / f"{name}.png",
    )
    summary = {k: v for k, v in report.items() if k != "samples"}
    print(json.dumps(summary, indent=1))
    healthy = result.num_server_errors == 0 and result.num_bad_accepted == 0 and kv_idle == 0
    print("PASS" if healthy else "FAIL")
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
