"""Is the new run worse than the baseline? Paired tests per metric over the cases both runs scored.

Pass/fail metrics use the exact McNemar test (only cases that changed verdict count); mean-valued ones (a
judge's score, latency, tokens, cost) use a paired bootstrap. A regression is a significant change in the bad
direction after Holm's correction over the gated metrics, so a suite with many metrics does not cry wolf.
Quality metrics are always gated; latency, tokens and cost are reported, and gated only with a tolerance
(`--tolerate latency=0.2`: a significant slowdown of more than 20% is a regression), as they move with the
machine's load, not only with the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from switchyard.evals.stats import holm, mcnemar_exact, paired_bootstrap
from switchyard.evals.summary import SUCCESS, RunFile

MEASURES = ("latency_s", "output_tokens", "cost")
"""Per-case measures, lower is better; gated only with a tolerance."""


@dataclass(frozen=True)
class MetricChange:
    metric: str
    kind: str
    """"rate" (pass/fail, McNemar) or "mean" (bootstrap)."""
    n: int
    """Paired cases."""
    base: float
    new: float
    difference: float
    """new - base: a rate difference, or a difference of means."""
    low: float
    high: float
    """95% paired-bootstrap interval of the difference."""
    p_value: float
    higher_is_better: bool = True
    worse: int | None = None
    """McNemar: cases the baseline passed and the new run failed."""
    better: int | None = None
    gated: bool = True
    tolerance: float | None = None
    regression: bool = False
    improvement: bool = False
    significant: bool = False
    """Gated: significant after Holm's correction. Not gated: p < alpha alone (reported, never a regression)."""

    @property
    def verdict(self) -> str:
        if self.regression:
            return "REGRESSION"
        if self.improvement:
            return "improved"
        if self.gated:
            return ""
        if self.significant:
            return "worse (not gated)" if self.moved_the_bad_way else "better (not gated)"
        return "(not gated)"

    @property
    def p_text(self) -> str:
        """The p-value as printed: a bootstrap cannot tell apart values below one over its resamples."""
        return "<1e-4" if self.kind == "mean" and self.p_value == 0 else f"{self.p_value:.3g}"

    @property
    def moved_the_bad_way(self) -> bool:
        return self.difference < 0 if self.higher_is_better else self.difference > 0


@dataclass(frozen=True)
class Comparison:
    base_label: str
    new_label: str
    suite: str
    paired: int
    only_base: int
    only_new: int
    alpha: float
    changes: list[MetricChange] = field(default_factory=list)

    @property
    def regressions(self) -> list[MetricChange]:
        return [c for c in self.changes if c.regression]


def _rate_change(metric: str, base: list[bool], new: list[bool], seed: int) -> MetricChange:
    test = mcnemar_exact(base, new)
    interval = paired_bootstrap([float(b) for b in base], [float(n) for n in new], seed=seed).interval
    base_rate, new_rate = sum(base) / len(base), sum(new) / len(new)
    return MetricChange(
        metric,
        "rate",
        len(base),
        base_rate,
        new_rate,
        new_rate - base_rate,
        interval.low,
        interval.high,
        test.p_value,
        worse=test.worse,
        better=test.better,
    )


def _mean_change(
    metric: str,
    base: list[float],
    new: list[float],
    higher_is_better: bool,
    tolerance: float | None,
    seed: int,
) -> MetricChange:
    plain = paired_bootstrap(base, new, seed=seed)
    p_value = plain.p_value
    if tolerance is not None:
        # H0: new is at most (1 + tolerance) x base; the test runs on new - (1 + tolerance) x base
        p_value = paired_bootstrap([b * (1 + tolerance) for b in base], new, seed=seed).p_value
    base_mean, new_mean = sum(base) / len(base), sum(new) / len(new)
    return MetricChange(
        metric,
        "mean",
        len(base),
        base_mean,
        new_mean,
        plain.mean,
        plain.interval.low,
        plain.interval.high,
        p_value,
        higher_is_better=higher_is_better,
        gated=higher_is_better or tolerance is not None,
        tolerance=tolerance,
    )


def compare_runs(
    base: RunFile,
    new: RunFile,
    alpha: float = 0.05,
    tolerances: Mapping[str, float] | None = None,
    seed: int = 0,
) -> Comparison:
    """Per-metric changes from `base` to `new` over their common cases, regressions decided at `alpha`."""
    tolerances = dict(tolerances or {})
    unknown = set(tolerances) - set(MEASURES)
    if unknown:
        raise ValueError(f"tolerances are for {', '.join(MEASURES)}, not {', '.join(sorted(unknown))}")
    common = [case_id for case_id in base.cases if case_id in new.cases]
    if not common:
        raise ValueError("the two runs share no case: compare runs of one suite")
    changes: list[MetricChange] = []
    metrics = list(dict.fromkeys(m for case_id in common for m in base.cases[case_id].passed))
    metrics = [SUCCESS, *[m for m in metrics if m != SUCCESS]]
    for metric in metrics:
        pairs = [
            (base.cases[i].passed[metric], new.cases[i].passed[metric])
            for i in common
            if metric in base.cases[i].passed and metric in new.cases[i].passed
        ]
        if pairs:
            changes.append(_rate_change(metric, [b for b, _ in pairs], [n for _, n in pairs], seed))
    valued = list(dict.fromkeys(m for case_id in common for m in base.cases[case_id].values))
    for metric in valued:
        pairs_v = [
            (base.cases[i].values[metric], new.cases[i].values[metric])
            for i in common
            if metric in base.cases[i].values and metric in new.cases[i].values
        ]
        if pairs_v:
            changes.append(
                _mean_change(
                    f"{metric} (score)", [b for b, _ in pairs_v], [n for _, n in pairs_v], True, None, seed
                )
            )
    ran = [i for i in common if base.cases[i].ran and new.cases[i].ran]
    if ran:
        for measure in MEASURES:
            base_values = [float(getattr(base.cases[i], measure)) for i in ran]
            new_values = [float(getattr(new.cases[i], measure)) for i in ran]
            changes.append(
                _mean_change(measure, base_values, new_values, False, tolerances.get(measure), seed)
            )
    changes = _decide(changes, alpha)
    return Comparison(
        base_label=f"{base.summary.model} ({base.summary.suite})",
        new_label=f"{new.summary.model} ({new.summary.suite})",
        suite=new.summary.suite,
        paired=len(common),
        only_base=len(set(base.cases) - set(new.cases)),
        only_new=len(set(new.cases) - set(base.cases)),
        alpha=alpha,
        changes=changes,
    )


def _decide(changes: list[MetricChange], alpha: float) -> list[MetricChange]:
    """Holm over the gated metrics; a rejected one is a regression when it moved the bad way."""
    gated = [i for i, c in enumerate(changes) if c.gated]
    rejected = holm([changes[i].p_value for i in gated], alpha)
    significant = {index for index, reject in zip(gated, rejected, strict=True) if reject}
    decided = []
    for index, change in enumerate(changes):
        worse = change.moved_the_bad_way
        if change.tolerance is not None:
            worse = change.new > change.base * (1 + change.tolerance)
        is_significant = index in significant if change.gated else change.p_value < alpha
        decided.append(
            replace(
                change,
                significant=is_significant,
                regression=change.gated and is_significant and worse,
                improvement=change.gated and is_significant and not worse and change.difference != 0,
            )
        )
    return decided


def format_comparison(comparison: Comparison) -> str:
    lines = [
        f"compare {comparison.base_label} -> {comparison.new_label}: {comparison.paired} paired cases"
        + (
            f" ({comparison.only_base} only in base, {comparison.only_new} only in new)"
            if comparison.only_base or comparison.only_new
            else ""
        ),
        f"{'metric':<24} {'base':>8} {'new':>8} {'diff':>8}  {'95% interval':<20} {'p':>7}  verdict",
    ]
    for c in comparison.changes:
        verdict = c.verdict
        lines.append(
            f"{c.metric:<24} {c.base:>8.4g} {c.new:>8.4g} {c.difference:>+8.4g}  [{c.low:+.4g}, {c.high:+.4g}]"
            f"{'':<4} {c.p_text:>7}  {verdict}"
        )
    found = comparison.regressions
    lines.append(
        f"{len(found)} significant regression(s): {', '.join(c.metric for c in found)}"
        if found
        else f"no significant regression (alpha {comparison.alpha}, Holm-corrected)"
    )
    return "\n".join(lines)
