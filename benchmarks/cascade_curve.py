"""Model cascades on the bundled pair: cost and quality of a draft-first cascade against always-large.

Two `switchyard serve` replicas, `switchyard-chat-draft` (the small tier) and `switchyard-chat` (the large
one), one torch thread each, behind one `switchyard fleet serve` gateway with tenants and a price table. The
gateway's TOML declares one cascade per bound (`[cascades.mean-N]`, `[cascades.min-N]`: tiers draft then chat); every configuration (each cascade, always-small = the draft pool, always-large =
the chat pool) runs the same cases of a shipped eval suite through the eval harness (switchyard/evals), as a
tenant of its own, so its cost is the gateway's own accounting (`GET /v1/usage`: each tier call at its
model's price).

Prices are proportional to the models' parameter counts (read from their safetensors headers): credits per
1M tokens = parameters in millions, for input and output alike (a forward pass costs ~2 FLOPs per parameter
per token either way). Cost is reported relative to always-large.

Two families of cascades, one per signal: a bound on the answer's mean token logprob (`min_mean_logprob`),
and a bound on its least confident token (`min_token_logprob`). The bounds are spread over the draft's own
confidence: a first pass asks the draft replica for each case's answer with logprobs, and each family's bounds
are the quantiles of those answers' values at the `--escalate` shares (the share of finished answers each
cascade passes over on that signal; truncated or empty answers escalate as well).

Quality is the suite's success rate (every check of a case passed), with its Wilson 95% interval, and the
paired difference from always-large with a seeded bootstrap 95% interval (case by case, same cases).

Usage: python benchmarks/cascade_curve.py [--suite bundled-gate] [--stride 9] [--out DIR]
Writes DIR/cascade.json, DIR/cascade.md and DIR/cascade.png (default benchmarks/results/cascade).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from switchyard.evals.chat_case import api_messages, request_kwargs  # noqa: E402
from switchyard.evals.endpoint import Endpoint  # noqa: E402
from switchyard.evals.runner import RunSettings, run_suite  # noqa: E402
from switchyard.evals.scorers import ScoringContext  # noqa: E402
from switchyard.evals.stats import paired_bootstrap, wilson_interval  # noqa: E402
from switchyard.evals.suite import ChatCase, Suite, load_suite  # noqa: E402
from switchyard.fleet.tenancy.database import open_database  # noqa: E402
from switchyard.fleet.tenancy.store import TenantStore  # noqa: E402
from switchyard.models.registry import BUNDLED_MODELS, DRAFT_MODEL, MAIN_MODEL  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from fleet_routing import Service, free_port, start_service  # noqa: E402  (the processes, started alike)

OPERATOR_KEY = "cascade-bench-operator"
ALWAYS_SMALL, ALWAYS_LARGE = "always-small", "always-large"
RESUMES = 3
"""Reruns of the cases the endpoint failed, per configuration."""


# ------------------------------------------------------------------------------------------------ processes
def start_replica(model: str, logs: Path) -> Service:
    port = free_port()
    command = [sys.executable, "-m", "switchyard.cli", "serve", model, "--port", str(port)]
    command += ["--host", "127.0.0.1", "--device", "cpu", "--dtype", "float32"]
    return start_service(model, command, port, logs)


# ------------------------------------------------------------------------------------------------ prices
def parameter_count(model: str) -> int:
    """Parameters in a bundled model's safetensors files, from their JSON headers (no weights loaded)."""
    total = 0
    for path in sorted(BUNDLED_MODELS[model].glob("*.safetensors")):
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= dim
                total += count
    return total


def prices_per_million(params: dict[str, int]) -> dict[str, float]:
    """Credits per 1M tokens = the model's parameters in millions (rounded to 1e-4)."""
    return {model: round(count / 1e6, 4) for model, count in params.items()}


# ------------------------------------------------------------------------------------------------ calibration
async def draft_confidence(suite: Suite, draft_url: str, concurrency: int) -> list[tuple[float, float]]:
    """Each case's draft answer's mean and lowest token logprob (answers cut off or empty are left out)."""
    client = openai.AsyncOpenAI(base_url=f"{draft_url}/v1", api_key="unused", max_retries=0, timeout=600)
    gate = asyncio.Semaphore(concurrency)

    async def one(case: ChatCase) -> tuple[float, float] | None:
        kwargs = request_kwargs({**case.params, "logprobs": True})
        if case.tools:
            kwargs["tools"] = case.tools
        async with gate:
            reply = await client.chat.completions.create(
                model=DRAFT_MODEL, messages=api_messages(case.messages), **kwargs
            )
        choice = reply.choices[0]
        entries = choice.logprobs.content if choice.logprobs is not None else None
        if choice.finish_reason not in ("stop", "tool_calls") or not entries:
            return None
        values = [entry.logprob for entry in entries]
        return sum(values) / len(values), min(values)

    found = await asyncio.gather(*(one(case) for case in suite.cases if isinstance(case, ChatCase)))
    await client.close()
    return [value for value in found if value is not None]


def thresholds_at(values: list[float], escalate: list[float]) -> list[float]:
    """The bounds below which those shares of the calibrated answers' values fall."""
    ordered = sorted(values)
    picked = []
    for share in escalate:
        index = min(len(ordered) - 1, max(0, round(share * len(ordered))))
        picked.append(round(ordered[index], 4))
    return sorted(set(picked), reverse=True)


# ------------------------------------------------------------------------------------------------ gateway
def fleet_toml(draft: Service, chat: Service, cascades: list[Configuration], prices: dict[str, float]) -> str:
    lines = [
        "health_timeout = 30.0  # a replica busy with a batch on a shared machine is slow, not gone\n",
        f'[pools.{DRAFT_MODEL}]\nworkers = ["{draft.url}"]\n',
        f'[pools.{MAIN_MODEL}]\nworkers = ["{chat.url}"]\n',
    ]
    for model, price in prices.items():
        lines.append(f"[prices.{model}]\ninput = {price}\noutput = {price}\n")
    for cascade in cascades:
        lines.append(
            f'[cascades.{cascade.model}]\ntiers = ["{DRAFT_MODEL}", "{MAIN_MODEL}"]\n'
            f"{cascade.signal} = {cascade.threshold}\n"
        )
    return "\n".join(lines)


def start_gateway(config: Path, tenants_db: Path, logs: Path) -> Service:
    port = free_port()
    command = [sys.executable, "-m", "switchyard.cli", "fleet", "serve", "--config", str(config)]
    command += ["--port", str(port), "--tenants-db", str(tenants_db), "--api-key", OPERATOR_KEY]
    return start_service("gateway", command, port, logs)


def usage_of(gateway: Service, tenant: str) -> dict[str, dict[str, Any]]:
    """The tenant's usage rows by model (requests, tokens, cost), as the gateway recorded them."""
    response = httpx.get(
        f"{gateway.url}/v1/usage",
        params={"tenant": tenant},
        headers={"authorization": f"Bearer {OPERATOR_KEY}"},
        timeout=30,
    )
    response.raise_for_status()
    return {row["model"]: row for row in response.json()["data"]}


# ------------------------------------------------------------------------------------------------ runs
@dataclass(frozen=True)
class Configuration:
    name: str
    model: str
    """What the eval sends as `model`: a pool or a cascade."""
    threshold: float | None = None
    signal: str | None = None
    """The cascade's bound: min_mean_logprob or min_token_logprob (None: a pool, no cascade)."""


def run_configuration(
    suite: Suite, configuration: Configuration, gateway: Service, key: str, out: Path, concurrency: int
) -> dict[str, bool]:
    """Each case's success (every check passed) through the gateway."""
    settings = RunSettings(
        endpoint=Endpoint(f"{gateway.url}/v1", configuration.model, key, 600.0), concurrency=concurrency
    )
    folder = out / "runs" / configuration.name
    for attempt in range(RESUMES + 1):
        # a case the endpoint failed (a replica ejected under a neighbour's load) is rerun: quality, not
        # availability, is measured here; what still failed after the resumes counts as failed
        results = asyncio.run(
            run_suite(suite, settings, folder, ScoringContext(), fresh=attempt == 0, progress=False)
        )
        errors = sum(1 for result in results.values() if result.error is not None)
        if not errors:
            break
        print(f"{configuration.name}: {errors} cases failed at the endpoint, resuming", flush=True)
        time.sleep(5)
    return {case.id: results[case.id].success if case.id in results else False for case in suite.cases}


def summarise(
    configuration: Configuration,
    successes: dict[str, bool],
    baseline: dict[str, bool],
    usage: dict[str, dict[str, Any]],
    large_cost: float | None,
) -> dict[str, Any]:
    ids = sorted(successes)
    passed = sum(successes.values())
    interval = wilson_interval(passed, len(ids))
    difference = paired_bootstrap(
        [float(baseline[i]) for i in ids], [float(successes[i]) for i in ids], seed=0
    )
    cost = sum(row["cost"] for row in usage.values())
    large_calls = usage.get(MAIN_MODEL, {}).get("requests", 0)
    return {
        "name": configuration.name,
        "model": configuration.model,
        "signal": configuration.signal,
        "threshold": configuration.threshold,
        "cases": len(ids),
        "success": passed / len(ids),
        "success_interval": [interval.low, interval.high],
        "difference_vs_large_points": 100 * difference.mean,
        "difference_interval_points": [100 * difference.interval.low, 100 * difference.interval.high],
        "escalated_share": (large_calls / len(ids) if configuration.signal is not None else None),
        "cost": cost,
        "relative_cost": cost / large_cost if large_cost else None,
        "usage_by_model": {
            model: {k: row[k] for k in ("requests", "prompt_tokens", "output_tokens", "cost")}
            for model, row in usage.items()
        },
    }


def oracle(rows: list[dict[str, Any]], outcomes: dict[str, dict[str, bool]]) -> dict[str, Any]:
    """The best any confidence signal could do with this pair (computed, not run): the draft answers every
    case, and exactly the cases it fails go on to the chat model. Its cost is the draft's on every case plus
    the chat model's on the failed share (each at its run's average cost per case)."""
    small, large = outcomes[ALWAYS_SMALL], outcomes[ALWAYS_LARGE]
    failed_share = sum(not ok for ok in small.values()) / len(small)
    by_name = {row["name"]: row for row in rows}
    success = sum(small[i] or large[i] for i in small) / len(small)
    return {
        "escalated_share": failed_share,
        "relative_cost": by_name[ALWAYS_SMALL]["relative_cost"] + failed_share,
        "success": success,
        "difference_vs_large_points": 100 * (success - by_name[ALWAYS_LARGE]["success"]),
    }


# ------------------------------------------------------------------------------------------------ report
def markdown(report: dict[str, Any]) -> str:
    rows = [
        "| configuration | bound | escalated | relative cost | success (95% CI) | vs always-large, "
        "points (95% CI) |",
        "|---|---|---|---|---|---|",
    ]
    for row in report["configurations"]:
        low, high = row["success_interval"]
        d_low, d_high = row["difference_interval_points"]
        escalated = "-" if row["escalated_share"] is None else f"{100 * row['escalated_share']:.0f}%"
        threshold = "-" if row["signal"] is None else f"{row['signal']} >= {row['threshold']:.3f}"
        rows.append(
            f"| {row['name']} | {threshold} | {escalated} | {row['relative_cost']:.3f} | "
            f"{100 * row['success']:.1f}% ({100 * low:.1f}-{100 * high:.1f}) | "
            f"{row['difference_vs_large_points']:+.1f} ({d_low:+.1f} to {d_high:+.1f}) |"
        )
    best = report["oracle"]
    rows.append(
        f"| oracle (computed: exactly the draft's failures escalated) | - | {100 * best['escalated_share']:.0f}% | "
        f"{best['relative_cost']:.3f} | {100 * best['success']:.1f}% | {best['difference_vs_large_points']:+.1f} |"
    )
    return "\n".join(rows) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    legends = {
        "min_mean_logprob": "bound on the mean logprob",
        "min_token_logprob": "bound on the lowest logprob",
    }
    for row in report["configurations"]:
        low, high = row["success_interval"]
        x, y = row["relative_cost"], 100 * row["success"]
        signal = row["signal"]
        axes.errorbar(
            x,
            y,
            yerr=[[y - 100 * low], [100 * high - y]],
            fmt={"min_mean_logprob": "o", "min_token_logprob": "^"}.get(signal, "s"),
            color={"min_mean_logprob": "tab:blue", "min_token_logprob": "tab:green"}.get(signal, "tab:red"),
            capsize=3,
            label=legends.pop(signal, None) if signal is not None else None,
        )
        label = f"{row['threshold']:.2f}" if signal is not None else row["name"]
        axes.annotate(label, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    best = report["oracle"]
    axes.plot(best["relative_cost"], 100 * best["success"], "*", color="black", markersize=10)
    axes.annotate(
        "oracle",
        (best["relative_cost"], 100 * best["success"]),
        textcoords="offset points",
        xytext=(6, -10),
        fontsize=8,
    )
    axes.axvline(0.6, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel("cost relative to always-large (tokens x price)")
    axes.set_ylabel("success rate, % (Wilson 95%)")
    axes.set_title(f"Cascade draft -> chat on {report['suite']} ({report['cases']} cases)")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# ------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="bundled-gate", help="a shipped chat suite (bundled-gate)")
    parser.add_argument("--stride", type=int, default=9, help="every Nth case of the suite (9: 195 of 1753)")
    parser.add_argument(
        "--escalate",
        default="0.1,0.25,0.4,0.6,0.8",
        help="shares of the draft's answers each cascade's bound is placed to escalate (per signal)",
    )
    parser.add_argument("--concurrency", type=int, default=8, help="cases in flight at once (8)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cascade")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    suite = load_suite(args.suite)
    suite = replace(suite, cases=suite.cases[:: args.stride])
    args.out.mkdir(parents=True, exist_ok=True)
    params = {model: parameter_count(model) for model in (DRAFT_MODEL, MAIN_MODEL)}
    prices = prices_per_million(params)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cascade-bench-") as scratch:
        work = Path(scratch)
        services: list[Service] = []
        try:
            draft, chat = (start_replica(model, work) for model in (DRAFT_MODEL, MAIN_MODEL))
            services += [draft, chat]
            confidence = asyncio.run(draft_confidence(suite, draft.url, args.concurrency))
            shares = [float(share) for share in args.escalate.split(",")]
            thresholds = {
                "min_mean_logprob": thresholds_at([mean for mean, _ in confidence], shares),
                "min_token_logprob": thresholds_at([lowest for _, lowest in confidence], shares),
            }
            print(f"calibrated on {len(confidence)} finished draft answers: {thresholds}", flush=True)
            cascades = [
                Configuration(f"{short}-{i}", f"{short}-{i}", bound, signal)
                for signal, short in (("min_mean_logprob", "mean"), ("min_token_logprob", "min"))
                for i, bound in enumerate(thresholds[signal])
            ]
            config = work / "fleet.toml"
            config.write_text(fleet_toml(draft, chat, cascades, prices))
            tenants_db = work / "tenants.db"
            configurations = [
                Configuration(ALWAYS_LARGE, MAIN_MODEL),
                Configuration(ALWAYS_SMALL, DRAFT_MODEL),
                *cascades,
            ]
            store = TenantStore(open_database(tenants_db))
            keys = {c.name: store.add(c.name).key for c in configurations}
            gateway = start_gateway(config, tenants_db, work)
            services.append(gateway)
            outcomes: dict[str, dict[str, bool]] = {}
            for configuration in configurations:
                began = time.monotonic()
                outcomes[configuration.name] = run_configuration(
                    suite, configuration, gateway, keys[configuration.name], work, args.concurrency
                )
                print(
                    f"{configuration.name}: {sum(outcomes[configuration.name].values())}/{len(suite.cases)} "
                    f"in {time.monotonic() - began:.0f} s",
                    flush=True,
                )
            usages = {c.name: usage_of(gateway, c.name) for c in configurations}
        finally:
            for service in reversed(services):
                service.stop()
    large_cost = sum(row["cost"] for row in usages[ALWAYS_LARGE].values())
    rows = [
        summarise(c, outcomes[c.name], outcomes[ALWAYS_LARGE], usages[c.name], large_cost)
        for c in configurations
    ]
    target = [
        row["name"]
        for row in rows
        if row["signal"] is not None
        and row["relative_cost"] <= 0.6
        and row["difference_vs_large_points"] >= -2.0
    ]
    report = {
        "oracle": oracle(rows, outcomes),
        "suite": args.suite,
        "stride": args.stride,
        "cases": len(suite.cases),
        "parameters": params,
        "prices_per_million_tokens": prices,
        "calibrated_answers": len(confidence),
        "thresholds": thresholds,
        "configurations": rows,
        "passed_cases": {
            name: sorted(i for i, ok in cases.items() if ok) for name, cases in outcomes.items()
        },
        "meets_target": target,
        "target": ">= 40% lower cost than always-large for <= 2 points of success lost (point estimates)",
        "seconds": time.monotonic() - started,
        "command": "python benchmarks/cascade_curve.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    (args.out / "cascade.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "cascade.md").write_text(markdown(report))
    plot(report, args.out / "cascade.png")
    print(markdown(report))
    print(f"meets the target: {target or 'none'}; {report['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
