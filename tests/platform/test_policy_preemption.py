"""Preemption on a fake clock: the budget paces discretionary preemption only (serving admissions and guarantee
reclaims pass its team cap), a job's per-window limit, and serving admitted oldest first.

The budget tests exhaust the victim team's hourly cap and ask who may still take its GPUs.
"""

from __future__ import annotations

import dataclasses

from policy_fixtures import INTERACTIVE, SERVING, FakeClock, cluster, job, run_on

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job
from switchyard.platform.policy import PreemptionBudget, TeamQuota
from switchyard.platform.policy.fair_share import FairSharePolicy
from switchyard.platform.usage import PreemptionRecord

# Team "b" may lose half of what it held this hour; the per-job interval is 30 minutes.
BUDGET = PreemptionBudget(min_interval_per_job_s=1800.0, max_team_loss_per_hour=0.5, min_team_loss_gpus=0)
QUOTAS = [TeamQuota("a", 4), TeamQuota("b", 0), TeamQuota("c", 0)]


def _exhausted(clock: FakeClock, lost_at: float | None = None) -> tuple[ClusterView, list[Job]]:
    """Team b runs two 4-GPU batch jobs and lost 8 GPUs at `lost_at` (ten minutes ago unless given): within
    the trailing hour that spends its cap (50% of 16)."""
    view = cluster(1)
    running = [
        run_on(view, job(f"b{i}", team="b", gpus=4), "node-0000", tuple(range(4 * i, 4 * i + 4)))
        for i in range(2)
    ]
    view.usage.record_preemption(
        PreemptionRecord(
            at=clock.now - 600.0 if lost_at is None else lost_at,
            job_id="gone",
            team="b",
            gpus=8,
            lost_gpu_s=0.0,
        )
    )
    return view, running


def _preempted(
    budget: PreemptionBudget, waiting: Job, clock: FakeClock, lost_at: float | None = None
) -> list[str]:
    view, running = _exhausted(clock, lost_at)
    decision = FairSharePolicy(QUOTAS, budget).decide(clock.now, [waiting], running, view)
    return sorted(p.job_id for p in decision.preempt)


def test_serving_takes_gpus_from_a_team_whose_budget_is_spent() -> None:
    clock = FakeClock(now=7200.0)
    serving = job("s", team="c", klass=SERVING, gpus=4, submitted_at=clock.now)
    assert len(_preempted(BUDGET, serving, clock)) == 1
    # The old rule (no exemption) leaves serving waiting: the failure the exemption removes.
    assert _preempted(dataclasses.replace(BUDGET, exempt_serving=False), serving, clock) == []


def test_a_team_within_its_guarantee_reclaims_from_a_borrower_whose_budget_is_spent() -> None:
    clock = FakeClock(now=7200.0)
    reclaim = job("a1", team="a", gpus=4, submitted_at=clock.now)  # a: 0 running, 4 guaranteed
    assert len(_preempted(BUDGET, reclaim, clock)) == 1
    assert _preempted(dataclasses.replace(BUDGET, exempt_reclaim=False), reclaim, clock) == []


def test_discretionary_preemption_stays_capped() -> None:
    """Interactive work of a team beyond its guarantee outranks batch, but only within the victim's budget."""
    clock = FakeClock(now=7200.0)
    interactive = job("i", team="c", klass=INTERACTIVE, gpus=4, submitted_at=clock.now)
    view, _ = _exhausted(clock)
    assert BUDGET.team_allowance("b", 8, view.usage, clock.now) == 0
    assert _preempted(BUDGET, interactive, clock) == []
    # Once the earlier loss leaves the trailing hour, the cap has room again.
    lost_at = clock.now - 600.0
    clock.advance(3600.0)
    assert len(_preempted(BUDGET, interactive, clock, lost_at)) == 1


def test_the_per_job_interval_still_protects_against_serving() -> None:
    """An exemption lifts the team cap, never the per-job interval: one job is not preempted twice in a row."""
    clock = FakeClock(now=7200.0)
    view, running = _exhausted(clock)
    for victim in running:
        victim.preempted_at.append(clock.now - 60.0)
    serving = job("s", team="c", klass=SERVING, gpus=4, submitted_at=clock.now)
    assert FairSharePolicy(QUOTAS, BUDGET).decide(clock.now, [serving], running, view).preempt == ()
    later = clock.advance(1800.0)
    assert len(FairSharePolicy(QUOTAS, BUDGET).decide(later, [serving], running, view).preempt) == 1


def test_a_job_is_preempted_at_most_n_times_per_window() -> None:
    """Two per hour lets the job that just restarted (least work at risk) be taken once more, never a third
    time within the hour; one per window is the old interval."""
    twice = PreemptionBudget(min_interval_per_job_s=3600.0, max_preemptions_per_job=2)
    victim = job("v", team="b", gpus=4)
    assert not twice.job_protected(victim, now=0.0)
    victim.preempted_at.append(1000.0)
    assert not twice.job_protected(victim, now=1600.0)
    assert PreemptionBudget(min_interval_per_job_s=1800.0).job_protected(victim, now=1600.0)
    victim.preempted_at.append(1600.0)
    assert twice.job_protected(victim, now=4000.0)  # two within the hour before t=4000
    assert not twice.job_protected(victim, now=4601.0)  # the first has left the window


def test_the_oldest_serving_replica_starts_first_whatever_its_teams_usage() -> None:
    """Serving is ordered by age, not team turns: GPUs a preemption freed for the older replica (held in the
    previous decision) go to it, not to a younger replica of a team with less usage."""
    clock = FakeClock()
    view = cluster(1)
    hog = run_on(view, job("old-run", team="heavy", gpus=4), "node-0000", (0, 1, 2, 3))
    view.usage.observe(clock.now, {"heavy": 64})
    view.usage.observe(clock.advance(3600.0), {"heavy": 4})
    pinned = run_on(
        view, job("pinned", team="x", klass=SERVING, gpus=4, preemptible=False), "node-0000", (4, 5, 6, 7)
    )
    view.release(hog.id)  # the preempted job has exited: 4 GPUs free
    pending = [
        job("young", team="light", klass=SERVING, gpus=4, submitted_at=clock.now - 10.0),
        job("older", team="heavy", klass=SERVING, gpus=4, submitted_at=clock.now - 40.0),
    ]
    decision = FairSharePolicy(QUOTAS, BUDGET).decide(clock.now, pending, [pinned], view)
    assert [job_id for job_id, _ in decision.start] == ["older"]
    # Batch keeps team turns: the team with less decayed usage goes first.
    batch = [
        job("b-heavy", team="heavy", gpus=4, submitted_at=clock.now - 40.0),
        job("b-light", team="light", gpus=4, submitted_at=clock.now - 10.0),
    ]
    decision = FairSharePolicy(QUOTAS, BUDGET).decide(clock.now, batch, [pinned], view)
    assert [job_id for job_id, _ in decision.start] == ["b-light"]
