"""The statistics against scipy (a test dependency only) and against hand-checked values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from switchyard.evals.stats import (
    binomial_two_sided,
    holm,
    mcnemar_exact,
    normal_quantile,
    paired_bootstrap,
    percentile,
    wilson_interval,
)


@pytest.mark.parametrize("p", [1e-6, 0.001, 0.02, 0.025, 0.3, 0.5, 0.8, 0.975, 0.999])
def test_normal_quantile_matches_scipy(p: float) -> None:
    assert normal_quantile(p) == pytest.approx(scipy_stats.norm.ppf(p), rel=1e-8, abs=1e-9)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (8, 10), (10, 10), (227, 271), (1, 2000)])
def test_wilson_interval_matches_the_formula(k: int, n: int) -> None:
    interval = wilson_interval(k, n)
    z = scipy_stats.norm.ppf(0.975)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert interval.low == pytest.approx(max(0, centre - half)) and interval.high == pytest.approx(
        min(1, centre + half)
    )
    assert 0 <= interval.low <= p <= interval.high <= 1
    assert wilson_interval(0, 0).low == 0 and wilson_interval(0, 0).high == 1


@pytest.mark.parametrize(("k", "n"), [(0, 0), (0, 5), (3, 10), (7, 10), (20, 25), (12, 24), (100, 230)])
def test_exact_binomial_matches_scipy(k: int, n: int) -> None:
    expected = 1.0 if n == 0 else scipy_stats.binomtest(k, n, 0.5).pvalue
    assert binomial_two_sided(k, n) == pytest.approx(expected, rel=1e-9)


def test_mcnemar_counts_only_the_changed_cases() -> None:
    base = [True] * 30 + [False] * 10 + [True] * 50
    new = [False] * 30 + [True] * 10 + [True] * 50
    test = mcnemar_exact(base, new)
    assert (test.worse, test.better) == (30, 10)
    assert test.p_value == pytest.approx(scipy_stats.binomtest(10, 40, 0.5).pvalue)
    same = mcnemar_exact(base, base)
    assert (same.worse, same.better, same.p_value) == (0, 0, 1.0)
    with pytest.raises(ValueError, match="length"):
        mcnemar_exact([True], [True, False])


def test_paired_bootstrap_is_seeded_and_finds_a_real_shift() -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(1.0, 0.3, 200)
    shifted = base + 0.1 + rng.normal(0, 0.05, 200)
    result = paired_bootstrap(base, shifted, seed=3)
    assert result == paired_bootstrap(base, shifted, seed=3)
    assert 0.08 < result.interval.low < 0.1 < result.interval.high < 0.12
    assert result.p_value < 0.001
    noise = paired_bootstrap(base, base + rng.normal(0, 0.05, 200), seed=3)
    assert noise.interval.contains(0.0) and noise.p_value > 0.05
    assert paired_bootstrap([2.0, 2.0], [2.0, 2.0]).p_value == 1.0


def test_holm_steps_down() -> None:
    # 0.01 <= 0.05/4, 0.015 <= 0.05/3, 0.03 > 0.05/2: the first two only
    assert holm([0.03, 0.01, 0.5, 0.015], 0.05) == [False, True, False, True]
    assert holm([], 0.05) == []


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
