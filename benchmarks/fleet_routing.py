"""Fleet routing: the same two bundled-model replicas behind each routing policy and behind sglang-router.

Two `switchyard serve switchyard-chat` replicas start once (one torch thread each) and stay up for the whole
run. In front of them, one router at a time: `switchyard fleet serve --worker A --worker B --policy P` for each
of Switchyard's six policies, then sglang-router's cache_aware policy; last, the same load straight at replica A
alone ("one replica"), the hit rate a single cache gets on the workload. Every router gets the same two
workloads, prompts, seeds and arrival times, each run starting from empty prefix caches (`POST
/reset_prefix_cache` on both replicas):

- tenants: many tenants, each with its own ~1k-token system prompt; multi-turn sessions whose history grows,
  tenants interleaved (prefix-heavy);
- random: random prompts of varied length, nothing shared.

Per router and workload: the fleet's prefix hit rate (cached / prompt tokens, from the responses' usage and, as
a cross-check, from the replicas' /metrics counters), TTFT p50/p99, throughput, load imbalance (max/mean tokens
served per replica, from the replicas' /metrics), the mean TTFT the routing path adds under load (the client's
less the replicas' own), the router's CPU time and, for Switchyard's gateway, its predicted vs the replicas'
reported cached tokens. Each router runs `--rounds` times (every other round in reverse order); TTFT
percentiles are the median of the rounds', since on a shared machine one round can catch a neighbour's burst.
Then benchmarks/fleet_overhead.py measures the latency the gateway itself adds, unloaded. Results go to
benchmarks/results/fleet/ (JSON, Markdown table, PNG plots, per-request rows).

sglang-router is a peer under test, not a dependency: `pip install sglang-router==0.3.2`.

`--baseline DIR` A/Bs a gateway change: each chosen Switchyard router also runs, as `NAME@baseline`, from the
checkout at DIR (e.g. `git worktree add DIR HEAD~1`), in the same rounds, against the same replicas.

Usage: python benchmarks/fleet_routing.py [--routers NAME,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from switchyard.bench.client import RequestResult, Target  # noqa: E402
from switchyard.bench.load import LoadShape  # noqa: E402
from switchyard.bench.runner import http_client, run_load  # noqa: E402
from switchyard.bench.summary import summarize  # noqa: E402
from switchyard.bench.workloads import WorkloadOptions, build_sessions  # noqa: E402

MODEL = "switchyard-chat"
TOKENIZER = ROOT / "switchyard" / "models" / "bundled" / MODEL
SGLANG_VERSION = "0.3.2"
STARTUP_SECONDS = 180.0


@dataclass(frozen=True)
class Router:
    name: str
    kind: Literal["switchyard", "sglang", "direct"]
    policy: str | None = None
    checkout: Path | None = None
    """Where a Switchyard gateway's code comes from: None for this checkout, else a baseline's (`--baseline`)."""


ROUTERS = (
    *(
        Router(policy, "switchyard", policy)
        for policy in ("round_robin", "least_load", "power_of_two", "session", "cache_aware", "kv_aware")
    ),
    Router("sglang-router", "sglang", "cache_aware"),
    Router("one replica", "direct"),
)


@dataclass(frozen=True)
class Workload:
    name: str
    options: WorkloadOptions
    sessions: int
    rate: float
    """Sessions arriving per second (Poisson)."""

    @property
    def requests(self) -> int:
        return self.sessions * (self.options.turns if self.options.name == "tenants" else 1)


@dataclass(frozen=True)
class ReplicaCounters:
    """One replica's cumulative counters from its /metrics."""

    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    cache_queries: float = 0.0
    cache_hits: float = 0.0
    requests: float = 0.0
    ttft_seconds: float = 0.0
    """Sum of the replica's own TTFTs (arrival at its server to first token): what the routing path adds
    is the client's TTFT less this."""
    ttft_count: float = 0.0

    def minus(self, before: ReplicaCounters) -> ReplicaCounters:
        return ReplicaCounters(
            *(getattr(self, f.name) - getattr(before, f.name) for f in dataclasses.fields(self))
        )

    @property
    def tokens_served(self) -> float:
        return self.prompt_tokens + self.generation_tokens


_COUNTERS = {
    "switchyard:prompt_tokens_total": "prompt_tokens",
    "switchyard:generation_tokens_total": "generation_tokens",
    "switchyard:prefix_cache_queries_total": "cache_queries",
    "switchyard:prefix_cache_hits_total": "cache_hits",
    "switchyard:e2e_request_latency_seconds_count": "requests",
    "switchyard:time_to_first_token_seconds_sum": "ttft_seconds",
    "switchyard:time_to_first_token_seconds_count": "ttft_count",
}


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def scrape_replica(url: str) -> ReplicaCounters:
    values = {
        _COUNTERS[name]: value
        for name, _, value in samples(httpx.get(f"{url}/metrics").text)
        if name in _COUNTERS
    }
    return ReplicaCounters(**values)


def scrape_gateway(url: str) -> dict[str, Any]:
    """The Switchyard gateway's routing decisions and its predicted vs the replicas' reported cached tokens."""
    decisions: dict[str, float] = {}
    predicted = reported = 0.0
    for name, labels, value in samples(httpx.get(f"{url}/metrics").text):
        if name == "switchyard:fleet_requests_total":
            decisions[labels["decision"]] = decisions.get(labels["decision"], 0.0) + value
        elif name == "switchyard:fleet_predicted_cached_tokens_total":
            predicted += value
        elif name == "switchyard:fleet_reported_cached_tokens_total":
            reported += value
    return {"decisions": decisions, "predicted_cached_tokens": predicted, "reported_cached_tokens": reported}


# ------------------------------------------------------------------------------------------------ processes
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def cpu_seconds(self) -> float:
        """CPU time the process has used so far (user + system, its threads included)."""
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def environment(threads: int, checkout: Path = ROOT) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }


def start_service(
    name: str, command: list[str], port: int, logs: Path, ready: str = "/health", checkout: Path = ROOT
) -> Service:
    log = logs / f"{name.replace(' ', '-')}.log"
    with log.open("wb") as out:
        # run from the checkout: `python -m` looks in the working directory before PYTHONPATH
        env = environment(1, checkout)
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=checkout)
    service = Service(name, f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{service.url}{ready}", timeout=2).status_code == 200:
                return service
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    service.stop()
    raise RuntimeError(f"{name} did not become ready in {STARTUP_SECONDS:.0f} s:\n{log.read_text()[-3000:]}")


def start_replica(number: int, args: argparse.Namespace, logs: Path) -> Service:
    port = free_port()
    command = [sys.executable, "-m", "switchyard.cli", "serve", MODEL, "--port", str(port)]
    command += ["--max-model-len", str(args.max_model_len), "--kv-cache-memory", str(args.kv_cache_memory)]
    return start_service(f"replica-{number}", command, port, logs)


def start_router(router: Router, replicas: list[Service], logs: Path) -> Service | None:
    """The router in front of `replicas`, answering requests; None for the direct run."""
    if router.kind == "direct":
        return None
    port = free_port()
    if router.kind == "switchyard":
        command = [sys.executable, "-m", "switchyard.cli", "fleet", "serve", "--port", str(port)]
        command += [arg for replica in replicas for arg in ("--worker", f"{replica.url}@{MODEL}")]
        command += ["--policy", str(router.policy)]
    else:
        command = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--worker-urls", *(replica.url for replica in replicas)]
        command += ["--policy", str(router.policy), "--log-level", "warn"]
        command += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    service = start_service(router.name, command, port, logs, checkout=router.checkout or ROOT)
    wait_until_routing(service)
    return service


def wait_until_routing(service: Service) -> None:
    """Healthy is not yet routing (the gateway's first health checks, sglang-router's worker registration)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.post(f"{service.url}/v1/chat/completions", json=body, timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{service.name} answers no request:\n{service.log.read_text()[-3000:]}")


def reset_caches(replicas: list[Service]) -> None:
    for replica in replicas:
        httpx.post(f"{replica.url}/reset_prefix_cache", timeout=30).raise_for_status()


# ------------------------------------------------------------------------------------------------ one run
async def send(base_url: str, workload: Workload, seed_offset: int, count: int, shape: LoadShape) -> Any:
    target = Target(f"{base_url}/v1", MODEL, api="chat", ignore_eos=True, temperature=0.0)
    options = dataclasses.replace(workload.options, seed=workload.options.seed + seed_offset)
    sessions = build_sessions(options, count)
    async with http_client(shape, timeout=600.0) as client:
        return await run_load(client, target, sessions, shape, progress=False)


@dataclass
class Measurement:
    """One router, one workload, one round: what the client saw and what the replicas and router counted."""

    results: list[RequestResult]
    duration: float
    per_replica: list[ReplicaCounters]
    cpu: list[float]
    """CPU seconds of the load generator, the router and each replica during the run."""
    gateway: dict[str, Any] | None
    load_average: float
    """The machine's 1-minute load average as the run began: neighbours' work shows up here."""


def measure(
    router: Router, service: Service | None, replicas: list[Service], workload: Workload
) -> Measurement:
    base_url = service.url if service is not None else replicas[0].url
    serving = replicas if service is not None else replicas[:1]
    # Unmeasured: connections, the gateway's tokenizer and first KV-event poll; other prompts (seed + 1).
    asyncio.run(send(base_url, workload, 1, 2, LoadShape(max_concurrency=1)))
    reset_caches(replicas)
    time.sleep(0.5)  # a kv_aware gateway hears of the evictions before the first request
    before = [scrape_replica(replica.url) for replica in serving]
    gateway_before = scrape_gateway(service.url) if router.kind == "switchyard" and service else None
    cpu_before = cpu_seconds(service, replicas)
    load_average = os.getloadavg()[0]
    shape = LoadShape(request_rate=workload.rate, seed=workload.options.seed)
    run = asyncio.run(send(base_url, workload, 0, workload.sessions, shape))
    cpu = [after - start for after, start in zip(cpu_seconds(service, replicas), cpu_before, strict=True)]
    per_replica = [scrape_replica(r.url).minus(b) for r, b in zip(serving, before, strict=True)]
    gateway = None
    if gateway_before is not None and service is not None:
        gateway = subtract(scrape_gateway(service.url), gateway_before)
    return Measurement(run.results, run.duration, per_replica, cpu, gateway, load_average)


def subtract(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """Counters' growth, nested dicts included (and the zero entries dropped)."""
    grown: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            grown[key] = {k: d for k, d in subtract(value, before.get(key, {})).items() if d}
        else:
            grown[key] = value - before.get(key, 0.0)
    return grown


def add(totals: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    return {
        key: add(totals.get(key, {}), value) if isinstance(value, dict) else totals.get(key, 0.0) + value
        for key, value in {**totals, **more}.items()
    }


def summarise(router: Router, workload: Workload, rounds: list[Measurement]) -> dict[str, Any]:
    """The rounds together. TTFT p50 and p99 are the median over rounds of each round's own (one round that a
    neighbour's burst of work slowed moves them little), hit rates and imbalance come from the counters summed
    over rounds; the pooled percentiles and every round's figures are kept beside them."""
    pooled = summarize(
        [r for m in rounds for r in m.results], sum(m.duration for m in rounds), request_rate=workload.rate
    )
    per_replica = [
        ReplicaCounters(
            *(
                sum(getattr(m.per_replica[i], f.name) for m in rounds)
                for f in dataclasses.fields(ReplicaCounters)
            )
        )
        for i in range(len(rounds[0].per_replica))
    ]
    gateways = [m.gateway for m in rounds if m.gateway is not None]
    by_round = [
        {
            **quality(summarize(m.results, m.duration, request_rate=workload.rate), m.per_replica),
            "load_average": m.load_average,
        }
        for m in rounds
    ]
    overall = quality(pooled, per_replica)
    result: dict[str, Any] = {
        "router": router.name,
        "workload": workload.name,
        **overall,
        "ttft_p50_ms": statistics.median(r["ttft_p50_ms"] for r in by_round),
        "ttft_p99_ms": statistics.median(r["ttft_p99_ms"] for r in by_round),
        "pooled_ttft_p50_ms": overall["ttft_p50_ms"],
        "pooled_ttft_p99_ms": overall["ttft_p99_ms"],
        "path_ms": overall["ttft_mean_ms"] - overall["replica_ttft_mean_ms"]
        if overall["ttft_mean_ms"]
        else None,
        "completed": pooled.completed,
        "failed": pooled.failed,
        "errors": pooled.errors,
        "cached_tokens": pooled.cached_tokens,
        "prompt_tokens": pooled.total_input_tokens,
        "e2e_p99_ms": 1e3 * pooled.e2e.p99 if pooled.e2e else None,
        "request_throughput": pooled.request_throughput,
        "output_token_throughput": pooled.output_token_throughput,
        "duration_s": pooled.duration,
        "per_replica": [dataclasses.asdict(c) for c in per_replica],
        "cpu_seconds": {
            "client": sum(m.cpu[0] for m in rounds),
            "router": sum(m.cpu[1] for m in rounds),
            "replicas": [sum(m.cpu[2 + i] for m in rounds) for i in range(len(rounds[0].cpu) - 2)],
        },
        "rounds": by_round,
    }
    if gateways:
        total: dict[str, Any] = {}
        for gateway in gateways:
            total = add(total, gateway)
        result["gateway"] = total
    return result


def quality(summary: Any, per_replica: list[ReplicaCounters]) -> dict[str, Any]:
    """Hit rate (responses' usage and replicas' counters), TTFT p50/p99 and load imbalance of a run."""
    served = [counters.tokens_served for counters in per_replica]
    queries = sum(c.cache_queries for c in per_replica)
    replica_ttft = sum(c.ttft_seconds for c in per_replica) / max(1.0, sum(c.ttft_count for c in per_replica))
    return {
        "ttft_mean_ms": 1e3 * summary.ttft.mean if summary.ttft else None,
        "replica_ttft_mean_ms": 1e3 * replica_ttft,
        "hit_rate": summary.cached_tokens / summary.total_input_tokens if summary.total_input_tokens else 0.0,
        "hit_rate_replica_metrics": sum(c.cache_hits for c in per_replica) / queries if queries else 0.0,
        "ttft_p50_ms": 1e3 * summary.ttft.median if summary.ttft else None,
        "ttft_p99_ms": 1e3 * summary.ttft.p99 if summary.ttft else None,
        "imbalance": max(served) / (sum(served) / len(served)) if len(served) > 1 and sum(served) else None,
    }


def cpu_seconds(router: Service | None, replicas: list[Service]) -> list[float]:
    """CPU seconds so far of this process (the load generator), the router (0 without one) and each replica:
    on a machine with few cores, what a router burns is taken from the replicas."""
    times = psutil.Process().cpu_times()
    own = float(times.user + times.system)
    return [own, router.cpu_seconds() if router is not None else 0.0, *(r.cpu_seconds() for r in replicas)]


def report_progress(
    started: float, round_number: int, router: Router, workload: Workload, measurement: Measurement
) -> None:
    summary = summarize(measurement.results, measurement.duration, request_rate=workload.rate)
    numbers = quality(summary, measurement.per_replica)
    imbalance = f"{numbers['imbalance']:.3f}" if numbers["imbalance"] is not None else "n/a"
    print(
        f"[{time.monotonic() - started:5.0f} s] round {round_number + 1} {router.name:>13} {workload.name:>7}: "
        f"hit {numbers['hit_rate']:.1%}, TTFT p50/p99 {numbers['ttft_p50_ms']:.0f}/{numbers['ttft_p99_ms']:.0f} "
        f"ms, mean {numbers['ttft_mean_ms']:.0f} (replicas' {numbers['replica_ttft_mean_ms']:.0f}) ms, imbalance {imbalance}, router CPU {measurement.cpu[1]:.1f} s, failed {summary.failed}",
        flush=True,
    )


def request_row(result: RequestResult) -> dict[str, Any]:
    """What a request's row keeps (not its inter-token gaps: the per-run files stay small)."""
    keep = ("index", "session", "turn", "start", "ttft", "e2e", "prompt_tokens", "output_tokens")
    return {
        **{k: round(v, 5) if isinstance(v := getattr(result, k), float) else v for k in keep},
        "cached_tokens": result.cached_tokens,
        "error": result.error,
    }


# ------------------------------------------------------------------------------------------------ overhead
def measure_overhead(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """benchmarks/fleet_overhead.py on the bundled model: its own replica and gateway, one request at a time."""
    path = out / "overhead.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "fleet_overhead.py"), "--model", MODEL]
    command += ["--requests", str(args.overhead_requests), "--json", str(path)]
    subprocess.run(command, check=True, env=environment(1), timeout=600)
    return dict(json.loads(path.read_text()))


# ------------------------------------------------------------------------------------------------ report
@dataclass
class Goal:
    what: str
    met: bool | None
    detail: str


def find(runs: list[dict], router: str, workload: str) -> dict | None:
    return next((r for r in runs if r["router"] == router and r["workload"] == workload), None)


def p99s(run: dict) -> str:
    """Each round's TTFT p99, in ms."""
    return " / ".join(f"{r['ttft_p99_ms']:.0f}" for r in run["rounds"])


def check_targets(runs: list[dict], overhead: dict | None) -> list[Goal]:
    targets = []
    kv, sgl, one = (find(runs, name, "tenants") for name in ("kv_aware", "sglang-router", "one replica"))
    if kv and sgl:
        targets.append(
            Goal(
                "kv_aware hit rate >= sglang-router's (tenants)",
                kv["hit_rate"] >= sgl["hit_rate"],
                f"{kv['hit_rate']:.1%} vs {sgl['hit_rate']:.1%}",
            )
        )
    if kv and one:
        ratio = kv["hit_rate"] / one["hit_rate"] if one["hit_rate"] else float("nan")
        targets.append(
            Goal(
                "kv_aware hit rate >= 90% of one replica's (tenants)",
                ratio >= 0.9,
                f"{kv['hit_rate']:.1%} vs {one['hit_rate']:.1%}: {ratio:.1%}",
            )
        )
    for workload in ("tenants", "random"):
        kv, sgl = find(runs, "kv_aware", workload), find(runs, "sglang-router", workload)
        if kv and sgl and kv["ttft_p99_ms"] is not None and sgl["ttft_p99_ms"] is not None:
            targets.append(
                Goal(
                    f"kv_aware TTFT p99 <= sglang-router's ({workload}; median of rounds)",
                    kv["ttft_p99_ms"] <= sgl["ttft_p99_ms"],
                    f"{kv['ttft_p99_ms']:.0f} vs {sgl['ttft_p99_ms']:.0f} ms (rounds: {p99s(kv)} vs {p99s(sgl)})",
                )
            )
    for run in runs:
        if run["workload"] == "random" and run["imbalance"] is not None:
            targets.append(
                Goal(
                    f"{run['router']} imbalance <= 1.2 (random)",
                    run["imbalance"] <= 1.2,
                    f"{run['imbalance']:.3f}",
                )
            )
    if overhead:
        added = overhead["added_p50_ms"]["value"]
        targets.append(Goal("gateway adds < 2 ms at p50 (unloaded)", added < 2.0, f"{added:.2f} ms"))
    return targets


TABLE_HEAD = (
    "| router | hit rate | hit rate (replicas' counters) | TTFT p50 ms | TTFT p99 ms | TTFT p99 by round | "
    "routing path ms | req/s | output tok/s | imbalance | requests per replica | router CPU s | failed |"
)


def markdown(runs: list[dict], targets: list[Goal], overhead: dict | None, setup: dict) -> str:
    lines = ["# Fleet routing", "", f"command: `{setup['command']}`", "", *legend(), ""]
    for workload in dict.fromkeys(r["workload"] for r in runs):
        lines += [
            f"## {workload}: {setup['workloads'][workload]['description']}",
            "",
            TABLE_HEAD,
            "|" + " --- |" * (TABLE_HEAD.count("|") - 1),
        ]
        lines += [table_row(run) for run in runs if run["workload"] == workload]
        lines.append("")
    if overhead:
        lines += [
            "## Gateway overhead (unloaded, 1-token completions, alternating direct and through the gateway)",
            "",
            f"direct p50 {overhead['direct']['p50_ms']:.2f} ms, through the gateway p50 "
            f"{overhead['gateway']['p50_ms']:.2f} ms: **{overhead['added_p50_ms']['value']:.2f} ms added**",
            "",
        ]
    lines += ["## Targets", "", "| target | met | measured |", "| --- | --- | --- |"]
    lines += [f"| {t.what} | {'yes' if t.met else 'NO'} | {t.detail} |" for t in targets]
    return "\n".join(lines) + "\n"


def legend() -> list[str]:
    return [
        "- hit rate: cached / prompt tokens over every request of every round, from the responses' usage; "
        "the replicas' own prefix-cache counters beside it.",
        "- TTFT p50 / p99: the median over rounds of each round's percentile (by round: each round's p99).",
        "- routing path: mean TTFT the client saw less the mean TTFT the replicas measured (arrival at the "
        "replica to first token), i.e. what the hops in between cost under this load.",
        "- imbalance: max / mean of the tokens (prompt + generated) each replica served.",
        "- router CPU: seconds of CPU the router process used during the runs (all rounds).",
    ]


def table_row(run: dict) -> str:
    imbalance = f"{run['imbalance']:.3f}" if run["imbalance"] is not None else "n/a"
    per_replica = " / ".join(f"{c['requests']:.0f}" for c in run["per_replica"])
    by_round = p99s(run)
    cells = [
        run["router"],
        f"{run['hit_rate']:.1%}",
        f"{run['hit_rate_replica_metrics']:.1%}",
        f"{run['ttft_p50_ms']:.0f}",
        f"{run['ttft_p99_ms']:.0f}",
        by_round,
        f"{run['path_ms']:.1f}",
        f"{run['request_throughput']:.2f}",
        f"{run['output_token_throughput']:.0f}",
        imbalance,
        per_replica,
        f"{run['cpu_seconds']['router']:.1f}",
        str(run["failed"]),
    ]
    return "| " + " | ".join(cells) + " |"


def plot(runs: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in runs))
    routers = list(dict.fromkeys(r["router"] for r in runs))
    paths = []
    for key, label, file, scale, digits in (
        ("hit_rate", "prefix hit rate (cached / prompt tokens, %)", "hit_rate.png", 100.0, "%.1f"),
        ("ttft_p99_ms", "TTFT p99 (ms): median of rounds, dots each round", "ttft_p99.png", 1.0, "%.0f"),
    ):
        figure, axes = plt.subplots(1, len(workloads), figsize=(6.5 * len(workloads), 4.5), squeeze=False)
        for axis, workload in zip(axes[0], workloads, strict=True):
            present = [r for r in routers if find(runs, r, workload)]
            values = [scale * (find(runs, r, workload) or {}).get(key, 0.0) for r in present]
            colours = ["tab:orange" if r == "sglang-router" else "tab:grey" if r == "one replica" else "tab:blue"
                       for r in present]  # fmt: skip
            bars = axis.bar(range(len(present)), values, color=colours)
            axis.bar_label(bars, fmt=digits, fontsize=8)
            if key == "ttft_p99_ms":
                for x, router in enumerate(present):
                    rounds = [r[key] for r in (find(runs, router, workload) or {}).get("rounds", [])]
                    axis.scatter([x] * len(rounds), rounds, color="black", s=10, zorder=3)
            axis.set_xticks(range(len(present)), present, rotation=35, ha="right")
            axis.set(title=workload, ylabel=label)
            if key == "hit_rate":
                axis.set_ylim(0, 100)
            axis.grid(True, axis="y", alpha=0.3)
        figure.tight_layout()
        path = out / file
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------------------ main
def workloads(args: argparse.Namespace) -> list[Workload]:
    tenants = WorkloadOptions(
        "tenants",
        api="chat",
        prefix_len=args.prefix_len,
        num_prefixes=args.tenants,
        turns=args.turns,
        input_len=64,
        output_len=32,
        range_ratio=0.25,
        tokenizer=TOKENIZER,
        seed=args.seed,
    )
    random_prompts = WorkloadOptions(
        "random",
        api="chat",
        input_len=512,
        output_len=32,
        range_ratio=0.5,
        tokenizer=TOKENIZER,
        seed=args.seed,
    )
    return [
        Workload("tenants", tenants, args.tenant_sessions, args.tenant_rate),
        Workload("random", random_prompts, args.random_requests, args.random_rate),
    ]


def describe(workload: Workload) -> str:
    options = workload.options
    if options.name == "tenants":
        return (
            f"{options.num_prefixes} tenants x {options.prefix_len}-token system prompt, {workload.sessions} "
            f"sessions of {options.turns} turns ({workload.requests} requests; user turns {options.input_len} and "
            f"replies {options.output_len} tokens +-{options.range_ratio:.0%}), {workload.rate:g} sessions/s"
        )
    return (
        f"{workload.sessions} prompts of {options.input_len} tokens +-{options.range_ratio:.0%}, replies "
        f"{options.output_len} tokens +-{options.range_ratio:.0%}, {workload.rate:g} requests/s"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [router.name for router in ROUTERS]
    parser.add_argument("--routers", default=",".join(names), help=f"comma-separated, of: {', '.join(names)}")
    parser.add_argument("--workloads", default="tenants,random", help="comma-separated: tenants, random")
    parser.add_argument("--tenants", type=int, default=16, help="tenants (16)")
    parser.add_argument("--prefix-len", type=int, default=1000, help="tokens of each system prompt (1000)")
    parser.add_argument("--turns", type=int, default=4, help="turns per session (4)")
    parser.add_argument("--tenant-sessions", type=int, default=64, help="sessions per run (64)")
    parser.add_argument("--tenant-rate", type=float, default=4.0, help="sessions per second (4)")
    parser.add_argument("--random-requests", type=int, default=128, help="requests per run (128)")
    parser.add_argument("--random-rate", type=float, default=10.0, help="requests per second (10)")
    parser.add_argument("--rounds", type=int, default=3, help="times each router runs each workload (3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument(
        "--kv-cache-memory", type=int, default=96 << 20, help="bytes per replica (96 MiB: 32k tokens)"
    )
    parser.add_argument("--overhead-requests", type=int, default=300, help="0 skips the overhead measurement")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of another revision: each chosen Switchyard router also runs from it, as NAME@baseline",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fleet")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chosen = args.routers.split(",")
    routers = [router for router in ROUTERS if router.name in chosen]
    if unknown := set(chosen) - {router.name for router in routers}:
        print(f"fleet_routing: unknown router(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if args.baseline is not None:
        if not (args.baseline / "switchyard" / "fleet").is_dir():
            print(f"fleet_routing: --baseline {args.baseline} is not a Switchyard checkout", file=sys.stderr)
            return 2
        baseline = args.baseline.resolve()
        routers += [
            dataclasses.replace(router, name=f"{router.name}@baseline", checkout=baseline)
            for router in routers
            if router.kind == "switchyard"
        ]
    if any(r.kind == "sglang" for r in routers) and importlib.util.find_spec("sglang_router") is None:
        print(
            f"fleet_routing: sglang-router is not installed; it is the benchmark's peer, not a Switchyard "
            f"dependency: pip install sglang-router=={SGLANG_VERSION} (or leave it out with --routers)",
            file=sys.stderr,
        )
        return 2
    chosen_workloads = [w for w in workloads(args) if w.name in args.workloads.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runs").mkdir(exist_ok=True)
    setup = {
        "command": shlex.join(
            ["python", "benchmarks/fleet_routing.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "replicas": f"2 x `switchyard serve {MODEL} --max-model-len {args.max_model_len} --kv-cache-memory "
        f"{args.kv_cache_memory}`, OMP_NUM_THREADS=1",
        "sglang_router": SGLANG_VERSION,
        "workloads": {
            w.name: {
                "description": describe(w),
                "options": {**dataclasses.asdict(w.options), "tokenizer": MODEL},
            }
            for w in chosen_workloads
        },
        "cpus": os.cpu_count(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    measurements: dict[tuple[str, str], list[Measurement]] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fleet-routing-") as workdir:
        logs = Path(workdir)
        replicas: list[Service] = []
        try:
            replicas = [start_replica(number, args, logs) for number in range(2)]
            for round_number in range(args.rounds):
                # Every other round in reverse, so a drift in the machine's load hits no router more than another.
                for router in routers if round_number % 2 == 0 else routers[::-1]:
                    service = start_router(router, replicas, logs)
                    try:
                        for workload in chosen_workloads:
                            measurement = measure(router, service, replicas, workload)
                            measurements.setdefault((router.name, workload.name), []).append(measurement)
                            report_progress(started, round_number, router, workload, measurement)
                    finally:
                        if service is not None:
                            service.stop()
        finally:
            for replica in replicas:
                replica.stop()
    runs = []
    for router in routers:
        for workload in chosen_workloads:
            rounds = measurements[(router.name, workload.name)]
            runs.append(summarise(router, workload, rounds))
            rows = [
                {"round": number, **request_row(result)}
                for number, measurement in enumerate(rounds)
                for result in sorted(measurement.results, key=lambda r: r.index)
            ]
            path = args.out / "runs" / f"{workload.name}-{router.name.replace(' ', '-')}.jsonl"
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    overhead = measure_overhead(args, args.out) if args.overhead_requests else None
    setup["seconds"] = round(time.monotonic() - started)
    targets = check_targets(runs, overhead)
    report = markdown(runs, targets, overhead, setup)
    (args.out / "fleet_routing.md").write_text(report)
    document = {
        "setup": setup,
        "runs": runs,
        "overhead": overhead,
        "targets": [dataclasses.asdict(t) for t in targets],
    }
    (args.out / "fleet_routing.json").write_text(json.dumps(document, indent=2))
    plot(runs, args.out)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
