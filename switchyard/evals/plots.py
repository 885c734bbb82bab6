"""The report's figures as PNG bytes: pass rates with their intervals and thresholds, latency and tokens per
case, and for a comparison each metric's difference with its interval (a forest plot) and latency CDFs."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from switchyard.evals.compare import Comparison
from switchyard.evals.summary import RunFile
from switchyard.extras import require_extra


def _pyplot() -> Any:
    with require_extra("evals"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    return plt


def _png(figure: Any) -> bytes:
    plt = _pyplot()
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def rates_png(run: RunFile) -> bytes:
    """Each metric's pass rate, its Wilson 95% interval, and its threshold where it has one."""
    plt = _pyplot()
    metrics = [run.summary.success, *run.summary.metrics.values()]
    figure, axis = plt.subplots(figsize=(7.5, 0.45 * len(metrics) + 1.2))
    rows = np.arange(len(metrics))[::-1]
    rates = np.array([m.rate for m in metrics])
    errors = np.clip(
        np.array([[m.rate - m.low for m in metrics], [m.high - m.rate for m in metrics]]), 0, None
    )
    colours = ["tab:red" if m.meets_threshold is False else "tab:blue" for m in metrics]
    axis.barh(rows, rates, color=colours, alpha=0.75)
    axis.errorbar(rates, rows, xerr=errors, fmt="none", ecolor="black", capsize=3, linewidth=1)
    for row, metric in zip(rows, metrics, strict=True):
        if metric.threshold is not None:
            axis.plot([metric.threshold] * 2, [row - 0.4, row + 0.4], color="tab:red", linewidth=2)
        axis.text(1.01, row, f"{metric.rate:.3f} (n={metric.total})", va="center", fontsize=8)
    axis.set_yticks(rows, [m.name for m in metrics])
    axis.set(xlim=(0, 1.22), xlabel="pass rate (bars: 95% Wilson interval; red tick: threshold)")
    axis.set_title(f"{run.summary.suite} on {run.summary.model}")
    axis.grid(True, axis="x", alpha=0.3)
    return _png(figure)


def _cdf(axis: Any, values: Sequence[float], label: str) -> None:
    ordered = np.sort(np.asarray(values, dtype=float))
    axis.plot(ordered, np.arange(1, len(ordered) + 1) / len(ordered), label=label)


def costs_png(run: RunFile) -> bytes | None:
    """Latency CDF (p50 and p99 marked) and the output tokens per case; None when no case ran."""
    ran = [record for record in run.cases.values() if record.ran]
    if not ran:
        return None
    plt = _pyplot()
    figure, (latency, tokens) = plt.subplots(1, 2, figsize=(10, 3.6))
    seconds = [r.latency_s for r in ran]
    _cdf(latency, seconds, "cases")
    for q, style in ((50, "--"), (99, ":")):
        latency.axvline(float(np.percentile(seconds, q)), color="grey", linestyle=style, label=f"p{q}")
    latency.set(xlabel="latency per case (s)", ylabel="fraction of cases", title="Latency")
    latency.grid(True, alpha=0.3)
    latency.legend(fontsize=8)
    tokens.hist([r.output_tokens for r in ran], bins=30, color="tab:green", alpha=0.8)
    tokens.set(xlabel="output tokens per case", ylabel="cases", title="Output tokens")
    return _png(figure)


def differences_png(comparison: Comparison) -> bytes:
    """Each metric's change (new - base) with its 95% interval: red a regression, green an improvement."""
    plt = _pyplot()
    rates = [c for c in comparison.changes if c.kind == "rate"]
    means = [c for c in comparison.changes if c.kind == "mean"]
    panels = [group for group in (rates, means) if group]
    figure, axes = plt.subplots(
        1, len(panels), figsize=(6 * len(panels), 0.45 * max(map(len, panels)) + 1.4), squeeze=False
    )
    for axis, group in zip(axes[0], panels, strict=True):
        rows = np.arange(len(group))[::-1]
        for row, change in zip(rows, group, strict=True):
            scale = 1.0 if change.kind == "rate" or change.base == 0 else 1 / abs(change.base)
            colour = "tab:red" if change.regression else ("tab:green" if change.improvement else "tab:grey")
            if not change.gated and change.significant:  # reported, not gated: lighter shades
                colour = "tab:orange" if change.verdict.startswith("worse") else "tab:olive"
            axis.plot([change.low * scale, change.high * scale], [row, row], color=colour, linewidth=2)
            axis.plot(change.difference * scale, row, "o", color=colour)
        axis.axvline(0, color="black", linewidth=0.8)
        axis.set_yticks(rows, [c.metric for c in group])
        axis.grid(True, axis="x", alpha=0.3)
        relative = group is means
        axis.set_xlabel(
            "relative change of the mean (new / base - 1)" if relative else "pass-rate change (new - base)"
        )
    figure.suptitle(f"{comparison.base_label} -> {comparison.new_label}", fontsize=10)
    return _png(figure)


def latency_cdfs_png(base: RunFile, new: RunFile, labels: tuple[str, str] = ("base", "new")) -> bytes | None:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.5, 3.6))
    drawn = False
    for run, label in zip((base, new), labels, strict=True):
        seconds = [r.latency_s for r in run.cases.values() if r.ran]
        if seconds:
            _cdf(axis, seconds, label)
            drawn = True
    if not drawn:
        plt.close(figure)
        return None
    axis.set(xlabel="latency per case (s)", ylabel="fraction of cases", title="Latency")
    axis.grid(True, alpha=0.3)
    axis.legend()
    return _png(figure)
