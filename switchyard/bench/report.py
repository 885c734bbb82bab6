"""The Markdown + PNG report of a run (or of a max-rate search): tables, latency CDFs, throughput over time."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from switchyard.bench.client import RequestResult
from switchyard.bench.search import SearchResult
from switchyard.bench.summary import Distribution, Summary
from switchyard.extras import require_extra

LATENCIES = ("ttft", "tpot", "itl", "e2e")


def token_times(results: list[RequestResult]) -> tuple[np.ndarray, np.ndarray]:
    """When output arrived (seconds since the run began) and how many tokens each arrival stands for."""
    times, weights = [], []
    for result in results:
        if not result.ok or result.ttft is None:
            continue
        arrivals = result.start + result.ttft + np.concatenate([[0.0], np.cumsum(result.itl)])
        times.append(arrivals)
        weights.append(np.full(len(arrivals), result.output_tokens / len(arrivals)))
    if not times:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(times), np.concatenate(weights)


def _latency_samples(results: list[RequestResult]) -> dict[str, list[float]]:
    done = [r for r in results if r.ok]
    return {
        "ttft": [r.ttft for r in done if r.ttft is not None],
        "tpot": [t for r in done if (t := r.tpot) is not None],
        "itl": [gap for r in done for gap in r.itl],
        "e2e": [r.e2e for r in done if r.e2e is not None],
    }


def write_png(path: Path, results: list[RequestResult], search: SearchResult | None = None) -> None:
    with require_extra("bench"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    panels = 3 if search else 2
    figure, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.2))
    cdf = axes[0]
    for name, values in _latency_samples(results).items():
        if values:
            ordered = np.sort(np.asarray(values)) * 1e3
            cdf.plot(ordered, np.arange(1, len(ordered) + 1) / len(ordered), label=name.upper())
    cdf.set(xscale="log", xlabel="latency (ms)", ylabel="fraction of samples", title="Latency CDFs")
    cdf.grid(True, which="both", alpha=0.3)
    if cdf.get_legend_handles_labels()[0]:  # nothing to plot when every request failed
        cdf.legend()

    throughput = axes[1]
    times, weights = token_times(results)
    if len(times):
        width = max(0.25, float(times.max()) / 40)  # about 40 bins whatever the run's length
        edges = np.arange(0.0, float(times.max()) + width, width)
        tokens, _ = np.histogram(times, bins=edges, weights=weights)
        ends = [r.start + r.e2e for r in results if r.ok and r.e2e is not None]
        completed, _ = np.histogram(ends, bins=edges)
        throughput.stairs(tokens / width, edges, label="output tokens/s", color="tab:blue")
        twin = throughput.twinx()
        twin.stairs(completed / width, edges, label="requests completed/s", color="tab:orange", alpha=0.7)
        twin.set_ylabel("requests/s")
        last = throughput.axvline(
            max(r.start for r in results), color="grey", linestyle=":", label="last arrival"
        )
        handles = [*throughput.get_legend_handles_labels()[0], *twin.get_legend_handles_labels()[0]]
        throughput.legend(
            handles=[h for h in handles if h is not last] + [last], loc="lower left", fontsize=8
        )
    throughput.set(xlabel="seconds since start", ylabel="tokens/s", title="Throughput over time")

    if search:
        trace = axes[2]
        probes = sorted((p for p in search.probes if p.summary and p.summary.ttft), key=lambda p: p.rate)
        rates = [p.rate for p in probes]
        for stat, style in (("median", "o-"), ("p99", "s--")):
            trace.plot(
                rates, [getattr(p.summary.ttft, stat) * 1e3 for p in probes], style, label=f"TTFT {stat}"
            )  # type: ignore[union-attr]
        for probe in probes:
            trace.plot(probe.rate, probe.summary.ttft.p99 * 1e3, "o", color="green" if probe.meets else "red")  # type: ignore[union-attr]
        if search.max_rate:
            trace.axvline(
                search.max_rate, color="green", linestyle=":", label=f"max rate {search.max_rate:.3g}"
            )
        trace.set(
            xlabel="request rate (req/s)", ylabel="TTFT (ms)", yscale="log", title="TTFT vs rate (search)"
        )
        trace.grid(True, alpha=0.3)
        trace.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _row(name: str, dist: Distribution | None) -> str:
    if dist is None:
        return f"| {name} | – | – | – | – | – |"
    cells = (dist.mean, dist.median, dist.p90, dist.p99, dist.max)
    return f"| {name} | " + " | ".join(f"{v * 1e3:.1f}" for v in cells) + " |"


def summary_markdown(summary: Summary) -> list[str]:
    rate = "all at once" if math.isinf(summary.request_rate) else f"{summary.request_rate:g} req/s"
    lines = [
        f"- requests: {summary.completed} completed, {summary.failed} failed, of {summary.num_requests}; "
        f"offered {rate}"
        + (f", max concurrency {summary.max_concurrency}" if summary.max_concurrency else ""),
        f"- duration {summary.duration:.2f} s; {summary.request_throughput:.2f} req/s; "
        f"{summary.output_token_throughput:.1f} output tok/s; {summary.input_token_throughput:.1f} input tok/s; "
        f"{summary.cached_tokens} prompt tokens served from cache",
    ]
    if summary.errors:
        lines.append("- errors: " + ", ".join(f"`{k}` × {v}" for k, v in summary.errors.items()))
    if summary.slo is not None:
        lines.append(
            f"- SLO {summary.slo}: **{'met' if summary.slo_met else 'not met'}**; goodput {summary.goodput:.2f} req/s"
        )
    lines += ["", "| ms | mean | median | p90 | p99 | max |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [_row(name.upper(), getattr(summary, name)) for name in LATENCIES]
    return lines


def search_markdown(search: SearchResult) -> list[str]:
    verdict = (
        f"**{search.max_rate:.3g} req/s**"
        if search.max_rate is not None
        else "**none** (the lowest rate failed)"
    )
    lines = [
        f"Max rate meeting the SLO: {verdict}"
        + (f"; lowest failing {search.min_failing_rate:.3g} req/s" if search.min_failing_rate else "")
        + ("" if search.converged else " (did not converge: probe limit or rate bound reached)"),
        "",
        "| probe | rate (req/s) | SLO | TTFT p50 (ms) | TTFT p99 (ms) | TPOT p99 (ms) | req/s | goodput | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, probe in enumerate(search.probes, start=1):
        s = probe.summary
        if s is None:
            lines.append(
                f"| {number} | {probe.rate:.3g} | {'met' if probe.meets else 'missed'} | | | | | | |"
            )
            continue
        ms = lambda d, stat: f"{getattr(d, stat) * 1e3:.1f}" if d else "–"  # noqa: E731
        lines.append(
            f"| {number} | {probe.rate:.3g} | {'met' if probe.meets else 'missed'} | {ms(s.ttft, 'median')} | "
            f"{ms(s.ttft, 'p99')} | {ms(s.tpot, 'p99')} | {s.request_throughput:.2f} | {s.goodput or 0:.2f} | "
            f"{sum(s.errors.values())} |"
        )
    return lines


def write_report(
    folder: Path,
    *,
    title: str,
    context: list[str],
    summary: Summary,
    results: list[RequestResult],
    search: SearchResult | None = None,
) -> Path:
    """report.md and report.png in `folder`; `context` is bullet lines (command, target, workload)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_png(folder / "report.png", results, search)
    lines = [f"# {title}", "", *(f"- {line}" for line in context), ""]
    if search is not None:
        lines += ["## Max rate under the SLO", "", *search_markdown(search), "", "## Run at the max rate", ""]
    else:
        lines += ["## Summary", ""]
    lines += [*summary_markdown(summary), "", "![latency CDFs and throughput](report.png)", ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path
