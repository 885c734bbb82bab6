"""The gateway's CPU per request: this tree's `switchyard fleet serve` against a baseline commit's, same run.

Both gateways sit in front of one upstream that answers at once (`benchmarks/instant_upstream.py`: a raw
asyncio HTTP/1.1 server on loopback streaming a fixed answer), so nearly all the CPU the gateway process burns
is its own request path: parsing, routing, relaying, accounting. The clients run in this process; only the
gateway's CPU seconds (user + system, from psutil) are counted, divided by the requests it answered. The
baseline runs without uvloop and httptools (--baseline-without), as before the fleet extra brought them. Rounds
alternate baseline and current so drift in the machine's load hits both alike. Scenarios: `stream` (a chat
stream of --tokens content events after a ~1,000-token prompt, `round_robin`, no tenancy), `cache_aware` (the
same through that policy's prefix trees), `tenancy` (the same with `--tenants-db`: the tenant's fields
written into the body and every event metered), `json` (the same request, not streamed). Reported per
scenario: ms of gateway CPU per request, baseline and current, and their ratio (current / baseline).

Usage: python benchmarks/gateway_overhead.py [--baseline REF] [--requests N] [--rounds R] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from fleet_overhead import free_port, start  # noqa: E402

SERVED = "bench"
SCENARIOS = ("stream", "cache_aware", "tenancy", "json")
SYSTEM_PROMPTS = [
    f"You are assistant {n} of tenant {n}. " + "Answer briefly and kindly. " * 150 for n in range(16)
]
"""Sixteen tenants' system prompts of about 4,000 characters (~1,000 tokens), as fleet_routing's tenants."""


@dataclass
class Gateway:
    label: str
    scenario: str
    url: str
    key: str | None
    process: subprocess.Popen[bytes]


def hiding(packages: list[str], folder: Path) -> Path:
    """A folder whose modules of those names raise ImportError: put first on the path, the baseline runs as
    in an environment without them (uvicorn then falls back to asyncio's loop and h11)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in packages:
        (folder / f"{name}.py").write_text(f"raise ImportError('{name} is hidden from the baseline')\n")
    return folder


def launch(
    command: list[str], health_url: str, source: Path, hidden: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start `command` importing switchyard from `source` only (run from `source`: `python -m` puts the working
    directory first on the path); return once `health_url` answers 200."""
    path = [str(hidden), str(source)] if hidden is not None else [str(source)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return start(command, health_url, env=env, cwd=source, timeout=120.0)


def exported_tree(ref: str, folder: Path) -> Path:
    """The `switchyard` package as it was at `ref` (git archive), to import the baseline gateway from."""
    folder.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "switchyard"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def new_key(db: Path, source: Path, name: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(source)}
    command = [sys.executable, "-m", "switchyard.cli", "tenants", "add", name, "--db", str(db), "--json"]
    added = subprocess.run(command, check=True, capture_output=True, text=True, env=env, cwd=source).stdout
    return str(json.loads(added)["api_key"])


def start_gateway(
    label: str, source: Path, scenario: str, upstream: str, workdir: Path, hidden: Path | None = None
) -> Gateway:
    port = free_port()
    command = [sys.executable, "-m", "switchyard.cli", "fleet", "serve", "--worker", f"{upstream}@{SERVED}"]
    policy = "cache_aware" if scenario == "cache_aware" else "round_robin"
    command += ["--port", str(port), "--policy", policy]
    key = None
    if scenario == "tenancy":
        db = workdir / f"{label}-tenants.db"
        key = new_key(db, source, "bench")
        command += ["--tenants-db", str(db)]
    url = f"http://127.0.0.1:{port}"
    return Gateway(label, scenario, url, key, launch(command, f"{url}/health", source, hidden))


async def send(client: httpx.AsyncClient, number: int, stream: bool, tokens: int) -> None:
    body = {
        "model": SERVED,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPTS[number % len(SYSTEM_PROMPTS)]},
            {"role": "user", "content": f"Question {number}: tell me about the sea, please. " * 8},
        ],
        "max_tokens": tokens,
        "stream": stream,
    }
    if stream:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                raise RuntimeError(f"gateway answered {response.status_code}: {await response.aread()!r}")
            async for _ in response.aiter_raw():
                pass
    else:
        response = await client.post("/v1/chat/completions", json=body)
        if response.status_code != 200:
            raise RuntimeError(f"gateway answered {response.status_code}: {response.text}")


async def load(gateway: Gateway, requests: int, concurrency: int, tokens: int) -> None:
    headers = {"authorization": f"Bearer {gateway.key}"} if gateway.key else {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=60, limits=limits) as client:
        remaining = iter(range(requests))

        async def worker() -> None:
            for number in remaining:
                await send(client, number, gateway.scenario != "json", tokens)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def measured_round(gateway: Gateway, requests: int, concurrency: int, tokens: int) -> float:
    """Milliseconds of gateway CPU per request over one round of `requests`."""
    process = psutil.Process(gateway.process.pid)
    asyncio.run(load(gateway, max(8, requests // 10), concurrency, tokens))  # warm: connections, caches
    before = cpu_seconds(process)
    asyncio.run(load(gateway, requests, concurrency, tokens))
    return 1000 * (cpu_seconds(process) - before) / requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git ref of the baseline gateway (main)")
    parser.add_argument("--requests", type=int, default=300, help="requests per round and gateway (300)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per scenario (3)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight at once (8)")
    parser.add_argument("--tokens", type=int, default=32, help="content events per answer (32)")
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=2.0,
        help="ms between the upstream's events (2), so each is its own read",
    )
    parser.add_argument(
        "--baseline-without",
        default="uvloop,httptools",
        help="packages the baseline runs without, as before the fleet extra had them (uvloop,httptools; '' none)",
    )
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (all)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    scenarios = [name for name in args.scenarios.split(",") if name]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")

    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        sources = {"baseline": exported_tree(args.baseline, workdir / "baseline"), "current": ROOT}
        without = [name for name in args.baseline_without.split(",") if name]
        hidden = hiding(without, workdir / "hidden") if without else None
        upstream_port = free_port()
        upstream_url = f"http://127.0.0.1:{upstream_port}"
        upstream = launch(
            [
                *(sys.executable, str(ROOT / "benchmarks" / "instant_upstream.py")),
                *("--port", str(upstream_port), "--gap-ms", str(args.gap_ms)),
            ],
            f"{upstream_url}/health",
            ROOT,
        )
        try:
            for scenario in scenarios:
                gateways = [
                    start_gateway(
                        label,
                        source,
                        scenario,
                        upstream_url,
                        workdir,
                        hidden if label == "baseline" else None,
                    )
                    for label, source in sources.items()
                ]
                samples: dict[str, list[float]] = {gateway.label: [] for gateway in gateways}
                try:
                    for _ in range(args.rounds):
                        for gateway in gateways:
                            samples[gateway.label].append(
                                measured_round(gateway, args.requests, args.concurrency, args.tokens)
                            )
                finally:
                    for gateway in gateways:
                        gateway.process.terminate()
                        gateway.process.wait(timeout=60)
                baseline = statistics.median(samples["baseline"])
                current = statistics.median(samples["current"])
                results[scenario] = {
                    "baseline_cpu_ms_per_request": baseline,
                    "current_cpu_ms_per_request": current,
                    "ratio": current / baseline,
                    "rounds": samples,
                }
                print(
                    f"{scenario:8} gateway CPU per request: baseline {baseline:5.2f} ms, current {current:5.2f} ms, "
                    f"ratio {current / baseline:4.2f}  (rounds: {samples})",
                    flush=True,
                )
        finally:
            upstream.terminate()
            upstream.wait(timeout=30)
    if args.json:
        setup = vars(args) | {"json": None, "measured_at": time.strftime("%Y-%m-%d")}
        args.json.write_text(json.dumps({"setup": setup, **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
