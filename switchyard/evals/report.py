"""Reports: one self-contained HTML page per run or comparison (tables, the plots embedded as PNG), and a
Markdown summary short enough for a CI job's summary or a pull-request comment."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path

from switchyard.evals import plots
from switchyard.evals.compare import Comparison, MetricChange
from switchyard.evals.results import CaseResult
from switchyard.evals.summary import MetricSummary, RunFile, RunSummary

MAX_FAILURES_SHOWN = 50

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; } td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.fail { color: #b00; font-weight: bold; } .pass { color: #070; } img { max-width: 100%; }
pre { white-space: pre-wrap; margin: 0; font-size: 0.85em; }
"""


def _img(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def _verdict(metric: MetricSummary) -> str:
    return {True: "pass", False: "FAIL", None: ""}[metric.meets_threshold]


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.0f} ms"


def _metric_rows(summary: RunSummary) -> list[tuple[str, ...]]:
    rows = []
    for m in [summary.success, *summary.metrics.values()]:
        target = f"{m.threshold:.2f}" if m.threshold is not None else "–"
        mean = f"{m.mean_value:.3f}" if m.mean_value is not None else "–"
        rows.append(
            (
                m.name,
                f"{m.rate:.3f}",
                f"[{m.low:.3f}, {m.high:.3f}]",
                f"{m.passed} / {m.total}",
                target,
                _verdict(m),
                mean,
            )
        )
    return rows


_METRIC_HEADER = ("metric", "rate", "95% interval", "passed", "target", "result", "mean value")


def _costs_line(summary: RunSummary) -> str:
    per_case = summary.output_tokens / summary.scored if summary.scored else 0.0
    return (
        f"latency p50 {_ms(summary.latency_p50)}, p99 {_ms(summary.latency_p99)}; tokens "
        f"{summary.input_tokens:,} in, {summary.output_tokens:,} out ({per_case:.1f} out per case); "
        f"cost ${summary.cost:.4f}"
    )


def _html_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            kind = (
                "fail" if cell in ("FAIL", "REGRESSION") else ("pass" if cell in ("pass", "improved") else "")
            )
            numeric = cell[:1].isdigit() or cell[:1] in "+-[$"
            classes = " ".join(c for c in (kind, "num" if numeric else "") if c)
            cells.append(
                f"<td class='{classes}'>{html.escape(cell)}</td>"
                if classes
                else f"<td>{html.escape(cell)}</td>"
            )
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _md_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def run_markdown(run: RunFile) -> str:
    summary = run.summary
    verdict = "all thresholds met" if summary.passed else "**a threshold was missed**"
    lines = [
        f"### `{summary.suite}` on `{summary.model}`",
        "",
        f"{summary.scored} of {summary.cases} cases scored"
        + (f", {summary.errors} errors" if summary.errors else "")
        + f"; {verdict}.",
        "",
    ]
    lines += _md_table(_METRIC_HEADER, _metric_rows(summary))
    lines += ["", _costs_line(summary)]
    return "\n".join(lines) + "\n"


def _failures(results: Mapping[str, CaseResult]) -> str:
    rows = []
    for result in results.values():
        if result.error is not None:
            rows.append((result.id, "(not run)", result.error, ""))
            continue
        for metric, check in result.checks.items():
            if not check.passed:
                content = str(result.output.get("content", ""))[:300]
                calls = result.output.get("tool_calls") or []
                if calls:
                    content += "\n" + "\n".join(f"{c['name']}({c['arguments']})" for c in calls)[:300]
                rows.append((result.id, metric, check.detail, content))
        if len(rows) >= MAX_FAILURES_SHOWN:
            break
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(c)}</td>"
        f"<td><pre>{html.escape(d)}</pre></td></tr>"
        for a, b, c, d in rows[:MAX_FAILURES_SHOWN]
    )
    return (
        f"<h2>First failures</h2><table><tr><th>case</th><th>metric</th><th>why</th><th>reply</th></tr>"
        f"{body}</table>"
    )


def run_html(run: RunFile, results: Mapping[str, CaseResult] | None = None) -> str:
    summary = run.summary
    settings = ", ".join(f"{k} {v}" for k, v in summary.settings.items() if v not in (None, {}, ""))
    body = [
        f"<p>{summary.scored} of {summary.cases} cases scored"
        + (f", {summary.errors} errors" if summary.errors else "")
        + f"; endpoint {html.escape(summary.base_url)}; {html.escape(settings)}</p>",
        f"<p><b>{'All thresholds met.' if summary.passed else 'A threshold was missed.'}</b></p>",
        _html_table(_METRIC_HEADER, _metric_rows(summary)),
        f"<p>{html.escape(_costs_line(summary))}</p>",
        _img(plots.rates_png(run), "pass rates"),
        _img(plots.costs_png(run), "latency and tokens"),
    ]
    if results is not None:
        body.append(_failures(results))
    return _page(f"eval: {summary.suite} on {summary.model}", "\n".join(body))


def _change_rows(comparison: Comparison) -> list[tuple[str, ...]]:
    rows = []
    for c in comparison.changes:
        verdict = c.verdict or "–"
        counts = f"{c.worse} worse, {c.better} better" if c.worse is not None else ""
        rows.append(
            (
                c.metric,
                _fmt(c, c.base),
                _fmt(c, c.new),
                f"{c.difference:+.4g}",
                f"[{c.low:+.4g}, {c.high:+.4g}]",
                c.p_text,
                counts,
                verdict,
            )
        )
    return rows


def _fmt(change: MetricChange, value: float) -> str:
    return f"{value:.3f}" if change.kind == "rate" else f"{value:.4g}"


_CHANGE_HEADER = ("metric", "base", "new", "difference", "95% interval", "p", "changed cases", "verdict")


def comparison_markdown(comparison: Comparison) -> str:
    found = comparison.regressions
    verdict = (
        f"**{len(found)} significant regression(s)**: {', '.join(c.metric for c in found)}"
        if found
        else f"no significant regression (alpha {comparison.alpha}, Holm-corrected)"
    )
    lines = [
        f"### `{comparison.suite}`: {comparison.base_label} → {comparison.new_label}",
        "",
        f"{comparison.paired} paired cases; {verdict}.",
        "",
    ]
    lines += _md_table(_CHANGE_HEADER, _change_rows(comparison))
    return "\n".join(lines) + "\n"


def comparison_html(
    comparison: Comparison, base: RunFile, new: RunFile, labels: tuple[str, str] = ("base", "new")
) -> str:
    found = comparison.regressions
    body = [
        f"<p>{comparison.paired} paired cases. Pass/fail metrics: exact McNemar test; means: paired bootstrap "
        f"(10,000 resamples); Holm-corrected at alpha {comparison.alpha}.</p>",
        f"<p><b>{len(found)} significant regression(s)"
        + (": " + ", ".join(c.metric for c in found) if found else "")
        + "</b></p>",
        _html_table(_CHANGE_HEADER, _change_rows(comparison)),
        _img(plots.differences_png(comparison), "differences"),
        _img(plots.latency_cdfs_png(base, new, labels), "latency CDFs"),
        f"<h2>{html.escape(labels[0])}: {html.escape(comparison.base_label)}</h2>",
        _html_table(_METRIC_HEADER, _metric_rows(base.summary)),
        f"<h2>{html.escape(labels[1])}: {html.escape(comparison.new_label)}</h2>",
        _html_table(_METRIC_HEADER, _metric_rows(new.summary)),
    ]
    return _page(f"eval compare: {comparison.suite}", "\n".join(body))


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
