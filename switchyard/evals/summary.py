"""A run's summary: each metric's pass rate with its Wilson interval and threshold, the success rate (every
check of a case passed), tool accuracy, latency percentiles, tokens and cost; and the run file that `compare`
reads (the summary plus each case's verdicts, so two runs can be paired case by case)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from switchyard.evals.results import CaseResult
from switchyard.evals.stats import percentile, wilson_interval
from switchyard.evals.suite import Suite

SUCCESS = "success"
"""The metric "every check of the case passed"."""
BUDGETS = ("latency", "cost")
"""Scorers whose values repeat a per-case measure (latency_s, cost): not compared a second time as scores."""
TOOL_METRICS = ("tool_arguments", "tool_selection")
"""What "tool accuracy" reports, the first the suite has."""


@dataclass(frozen=True)
class MetricSummary:
    name: str
    passed: int
    total: int
    low: float
    """Wilson 95% interval of the rate."""
    high: float
    threshold: float | None = None
    mean_value: float | None = None
    """For metrics with values (a judge's score in [0, 1], a latency): their mean."""

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def meets_threshold(self) -> bool | None:
        if self.threshold is None:
            return None
        return self.total > 0 and self.rate >= self.threshold


@dataclass(frozen=True)
class RunSummary:
    suite: str
    model: str
    base_url: str
    cases: int
    scored: int
    errors: int
    success: MetricSummary
    metrics: dict[str, MetricSummary]
    latency_p50: float | None
    latency_p99: float | None
    latency_mean: float | None
    input_tokens: int
    output_tokens: int
    cost: float
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Every thresholded metric reached its threshold."""
        return all(m.meets_threshold is not False for m in [self.success, *self.metrics.values()])

    @property
    def tool_accuracy(self) -> MetricSummary | None:
        return next((self.metrics[name] for name in TOOL_METRICS if name in self.metrics), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        for metric in [out["success"], *out["metrics"].values()]:
            metric["rate"] = metric["passed"] / metric["total"] if metric["total"] else 0.0
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunSummary:
        def metric(data: Mapping[str, Any]) -> MetricSummary:
            return MetricSummary(**{k: v for k, v in data.items() if k != "rate"})

        fields = {k: v for k, v in raw.items() if k not in ("passed",)}
        fields["success"] = metric(raw["success"])
        fields["metrics"] = {name: metric(m) for name, m in raw["metrics"].items()}
        return cls(**fields)


def _metric(
    name: str, outcomes: Sequence[bool], values: Sequence[float], threshold: float | None
) -> MetricSummary:
    passed = sum(outcomes)
    interval = wilson_interval(passed, len(outcomes))
    mean = sum(values) / len(values) if values else None
    return MetricSummary(name, passed, len(outcomes), interval.low, interval.high, threshold, mean)


def case_passes(result: CaseResult | None, metric: str) -> bool:
    """A case's verdict on a metric; a case that did not run (or errored) fails every check."""
    if result is None or result.error is not None:
        return False
    check = result.checks.get(metric)
    return check is not None and check.passed


def summarize(
    suite: Suite, results: Mapping[str, CaseResult], model: str, base_url: str, settings: Mapping[str, Any]
) -> RunSummary:
    """The summary over the suite's cases; a case without a result counts as failed."""
    metrics: dict[str, MetricSummary] = {}
    for name in suite.metrics():
        cases = [case for case in suite.cases if any(c.metric == name for c in case.checks)]
        outcomes = [case_passes(results.get(case.id), name) for case in cases]
        values = [
            check.value
            for case in cases
            if (result := results.get(case.id)) is not None and result.error is None
            if (check := result.checks.get(name)) is not None and check.value is not None
        ]
        metrics[name] = _metric(name, outcomes, values, suite.thresholds.get(name))
    ran = [results[case.id] for case in suite.cases if case.id in results and results[case.id].error is None]
    successes = [(result := results.get(case.id)) is not None and result.success for case in suite.cases]
    latencies = [r.latency_s for r in ran]
    return RunSummary(
        suite=suite.name,
        model=model,
        base_url=base_url,
        cases=len(suite.cases),
        scored=len(ran),
        errors=sum(1 for case in suite.cases if case.id in results and results[case.id].error is not None),
        success=_metric(SUCCESS, successes, [], suite.thresholds.get(SUCCESS)),
        metrics=metrics,
        latency_p50=percentile(latencies, 50),
        latency_p99=percentile(latencies, 99),
        latency_mean=sum(latencies) / len(latencies) if latencies else None,
        input_tokens=sum(r.input_tokens for r in ran),
        output_tokens=sum(r.output_tokens for r in ran),
        cost=sum(r.cost for r in ran),
        settings=dict(settings),
    )


@dataclass(frozen=True)
class CaseRecord:
    """One case as a comparison pairs it: its verdicts and what it cost."""

    passed: dict[str, bool]
    values: dict[str, float]
    latency_s: float
    input_tokens: int
    output_tokens: int
    cost: float
    ran: bool
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunFile:
    """`run.json`: the summary and every case's record, what `eval compare` reads."""

    summary: RunSummary
    cases: dict[str, CaseRecord]

    def to_json(self) -> str:
        cases = {
            case_id: {**asdict(record), "tags": list(record.tags)} for case_id, record in self.cases.items()
        }
        return json.dumps({"summary": self.summary.to_dict(), "cases": cases}, indent=1, ensure_ascii=False)

    @classmethod
    def read(cls, path: Path) -> RunFile:
        """A run.json, or the run folder holding one."""
        file = path / "run.json" if path.is_dir() else path
        try:
            raw = json.loads(file.read_text(encoding="utf-8"))
            cases = {
                case_id: CaseRecord(**{**record, "tags": tuple(record.get("tags", ()))})
                for case_id, record in raw["cases"].items()
            }
            return cls(RunSummary.from_dict(raw["summary"]), cases)
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise RunFileError(f"{file}: not a run file of `switchyard eval run` ({exc})") from None


class RunFileError(ValueError):
    """A file given to `compare` is not a run's run.json."""


def run_file(suite: Suite, results: Mapping[str, CaseResult], summary: RunSummary) -> RunFile:
    cases: dict[str, CaseRecord] = {}
    for case in suite.cases:
        result = results.get(case.id)
        ran = result is not None and result.error is None
        metrics = [c.metric for c in case.checks]
        passed = {m: case_passes(result, m) for m in metrics}
        passed[SUCCESS] = ran and result is not None and result.success
        values = {}
        if ran and result is not None:  # latency and cost are compared from the measures themselves
            values = {
                m: c.value
                for m, c in result.checks.items()
                if c.value is not None and c.scorer not in BUDGETS
            }
        cases[case.id] = CaseRecord(
            passed=passed,
            values=values,
            latency_s=result.latency_s if ran and result else 0.0,
            input_tokens=result.input_tokens if ran and result else 0,
            output_tokens=result.output_tokens if ran and result else 0,
            cost=result.cost if ran and result else 0.0,
            ran=ran,
            tags=case.tags,
        )
    return RunFile(summary, cases)


def format_summary(summary: RunSummary) -> str:
    """The summary as a terminal table."""
    lines = [
        f"suite {summary.suite}: {summary.scored} of {summary.cases} cases scored"
        + (f", {summary.errors} errors" if summary.errors else "")
        + f"; model {summary.model}"
    ]
    lines.append(f"{'metric':<22} {'rate':>6}  {'95% interval':<15} {'n':>6} {'target':>7}  result")
    for metric in [summary.success, *summary.metrics.values()]:
        target = f"{metric.threshold:.2f}" if metric.threshold is not None else "-"
        verdict = {True: "PASS", False: "FAIL", None: ""}[metric.meets_threshold]
        value = f"  mean value {metric.mean_value:.3f}" if metric.mean_value is not None else ""
        lines.append(
            f"{metric.name:<22} {metric.rate:>6.3f}  [{metric.low:.3f}, {metric.high:.3f}]  {metric.total:>6} "
            f"{target:>7}  {verdict}{value}"
        )
    tool = summary.tool_accuracy
    if tool is not None:
        lines.append(f"tool accuracy ({tool.name}): {tool.rate:.3f} [{tool.low:.3f}, {tool.high:.3f}]")
    if summary.latency_p50 is not None and summary.latency_p99 is not None:
        lines.append(
            f"latency p50 {summary.latency_p50 * 1e3:.0f} ms, p99 {summary.latency_p99 * 1e3:.0f} ms"
        )
    lines.append(
        f"tokens: {summary.input_tokens:,} in, {summary.output_tokens:,} out; cost ${summary.cost:.4f}"
    )
    lines.append(f"thresholds: {'all met' if summary.passed else 'MISSED'}")
    return "\n".join(lines)
