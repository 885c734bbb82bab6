"""The statistics behind a run's intervals and a comparison's verdicts, in numpy alone (no scipy at runtime).

- `wilson_interval`: a pass rate's confidence interval that stays inside [0, 1] and behaves at 0 and n.
- `mcnemar_exact`: two runs on the same cases, pass/fail: only the cases that changed carry information, and
  under "no difference" each change is a fair coin, so the p-value is an exact binomial tail.
- `paired_bootstrap`: a mean difference (scores, latency, tokens) over the same cases, resampling cases with a
  seeded RNG so a report is reproducible.
- `holm`: several metrics are tested at once; Holm's step-down keeps the chance of any false alarm at alpha.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def normal_quantile(p: float) -> float:
    """The standard normal quantile (Acklam's rational approximation, relative error below 1.2e-9)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile needs 0 < p < 1, got {p}")
    a = (
        -39.69683028665376,
        220.9460984245205,
        -275.9285104469687,
        138.3577518672690,
        -30.66479806614716,
        2.506628277459239,
    )
    b = (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572)
    c = (
        -0.007784894002430293,
        -0.3223964580411365,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    )
    d = (0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416)
    low = 0.02425
    if p < low:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
        )
    if p > 1 - low:
        return -normal_quantile(1 - p)
    q = p - 0.5
    r = q * q
    return (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    )


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson's score interval for a binomial rate; (0, 1) when there are no trials."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return Interval(0.0, 1.0)
    z = normal_quantile(0.5 + confidence / 2)
    rate = successes / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(max(0.0, centre - half), min(1.0, centre + half))


def binomial_two_sided(k: int, n: int) -> float:
    """P(a fair-coin count at least as far from n/2 as k) over n flips: the exact two-sided sign test."""
    if n == 0:
        return 1.0
    tail = min(k, n - k)
    # log-space sums keep n in the thousands exact enough
    logs = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
        for i in range(tail + 1)
    ]
    one_side = math.fsum(math.exp(v) for v in logs)
    return min(1.0, 2 * one_side)


@dataclass(frozen=True)
class McNemar:
    worse: int
    """Cases the baseline passed and the new run failed."""
    better: int
    """Cases the baseline failed and the new run passed."""
    p_value: float


def mcnemar_exact(base: Sequence[bool], new: Sequence[bool]) -> McNemar:
    """Exact McNemar test on paired pass/fail outcomes (the same cases, in the same order)."""
    if len(base) != len(new):
        raise ValueError(f"paired outcomes differ in length: {len(base)} vs {len(new)}")
    worse = sum(1 for b, n in zip(base, new, strict=True) if b and not n)
    better = sum(1 for b, n in zip(base, new, strict=True) if n and not b)
    return McNemar(worse, better, binomial_two_sided(worse, worse + better))


@dataclass(frozen=True)
class BootstrapDifference:
    mean: float
    """Mean of new - base over the paired cases."""
    interval: Interval
    p_value: float
    """Two-sided: twice the smaller share of resampled means on either side of zero."""


def paired_bootstrap(
    base: Sequence[float],
    new: Sequence[float],
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> BootstrapDifference:
    """Percentile interval of the mean paired difference, resampling cases with a seeded RNG."""
    base_array, new_array = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    if base_array.shape != new_array.shape:
        raise ValueError(f"paired samples differ in length: {len(base_array)} vs {len(new_array)}")
    if base_array.size == 0:
        return BootstrapDifference(0.0, Interval(0.0, 0.0), 1.0)
    differences = new_array - base_array
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for start in range(0, resamples, 1000):  # chunks bound memory at 1000 x n indices
        stop = min(start + 1000, resamples)
        picks = rng.integers(0, differences.size, size=(stop - start, differences.size))
        means[start:stop] = differences[picks].mean(axis=1)
    alpha = 1 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    if np.all(differences == differences[0]):
        p_value = 1.0 if differences[0] == 0 else 0.0
    else:
        below, above = float(np.mean(means <= 0)), float(np.mean(means >= 0))
        p_value = min(1.0, 2 * min(below, above))
    return BootstrapDifference(float(differences.mean()), Interval(float(low), float(high)), p_value)


def bootstrap_rate_difference(
    base: Sequence[bool], new: Sequence[bool], confidence: float = 0.95, seed: int = 0
) -> Interval:
    """Interval of a paired difference in pass rates (new - base)."""
    return paired_bootstrap(
        [float(b) for b in base], [float(n) for n in new], confidence=confidence, seed=seed
    ).interval


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which hypotheses Holm's step-down procedure rejects at family-wise error `alpha`, in input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, index in enumerate(order):
        if p_values[index] > alpha / (len(p_values) - rank):
            break
        rejected[index] = True
    return rejected


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100, linear interpolation); None for no values."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))
