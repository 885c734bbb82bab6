"""The usage ledger's decay and the preemption budget's arithmetic."""

from __future__ import annotations

import math

import pytest
from policy_fixtures import FakeClock

from switchyard.platform.policy import PreemptionBudget, TeamQuota
from switchyard.platform.policy.quotas import weighted_entitlement
from switchyard.platform.usage import PreemptionRecord, UsageLedger


def test_usage_integrates_gpus_held_and_halves_each_half_life() -> None:
    clock = FakeClock()
    ledger = UsageLedger(half_life_s=3600.0)
    ledger.observe(clock.now, {"a": 8})
    ledger.observe(clock.advance(1.0), {})
    assert ledger.decayed_gpu_s("a") == pytest.approx(8.0, rel=1e-3)
    ledger.observe(clock.advance(3600.0), {})
    assert ledger.decayed_gpu_s("a") == pytest.approx(4.0, rel=1e-3)
    steady = UsageLedger(half_life_s=100.0)
    steady.observe(0.0, {"b": 2})
    steady.observe(10_000.0, {"b": 2})
    assert steady.decayed_gpu_s("b") == pytest.approx(2 * 100.0 / math.log(2), rel=1e-6)


def test_preemption_records_age_out_of_the_window() -> None:
    ledger = UsageLedger(window_s=3600.0)
    ledger.record_preemption(PreemptionRecord(at=0.0, job_id="j", team="a", gpus=4, lost_gpu_s=10.0))
    assert ledger.preempted_gpus_since("a", 0.0) == 4
    ledger.observe(3601.0, {})
    assert ledger.preempted_gpus_since("a", 0.0) == 0


def test_team_allowance_is_a_share_of_what_it_held_this_hour() -> None:
    ledger = UsageLedger()
    budget = PreemptionBudget(max_team_loss_per_hour=0.25, min_team_loss_gpus=0)
    assert budget.team_allowance("a", 32, ledger, now=100.0) == 8
    ledger.record_preemption(PreemptionRecord(at=50.0, job_id="j", team="a", gpus=8, lost_gpu_s=0.0))
    assert budget.team_allowance("a", 24, ledger, now=100.0) == 0
    assert PreemptionBudget(min_team_loss_gpus=8).team_allowance("b", 1, ledger, now=100.0) == 8


def test_entitlement_water_fills_by_weight_and_caps_at_demand() -> None:
    share = weighted_entitlement(100.0, {"a": 10.0, "b": 200.0, "c": 200.0}, {"a": 1.0, "b": 1.0, "c": 3.0})
    assert share == pytest.approx({"a": 10.0, "b": 22.5, "c": 67.5})


def test_bad_quota_and_budget_are_refused() -> None:
    with pytest.raises(ValueError):
        TeamQuota("a", -1)
    with pytest.raises(ValueError):
        PreemptionBudget(max_team_loss_per_hour=2.0)
    with pytest.raises(ValueError):
        PreemptionBudget(max_preemptions_per_job=0)
