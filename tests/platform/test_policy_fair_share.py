"""FairSharePolicy on a fake clock: classes, fair share, quotas and reclaim, the budget, victims, reservations."""

from __future__ import annotations

from policy_fixtures import (
    BATCH,
    INTERACTIVE,
    SERVING,
    FakeClock,
    cluster,
    job,
    observe,
    run_on,
    snapshot,
)

from switchyard.platform.jobs import JobState
from switchyard.platform.policy import PreemptionBudget, TeamQuota
from switchyard.platform.policy.fair_share import FairSharePolicy
from switchyard.platform.usage import PreemptionRecord

NO_BUDGET = PreemptionBudget(min_interval_per_job_s=0.0, max_team_loss_per_hour=1.0, min_team_loss_gpus=1000)


def test_higher_class_starts_first_when_only_one_fits() -> None:
    view = cluster(1)
    pending = [job("b", klass=BATCH, gpus=8), job("s", klass=SERVING, gpus=8, submitted_at=5.0)]
    decision = FairSharePolicy().decide(10.0, pending, [], view)
    assert [job_id for job_id, _ in decision.start] == ["s"]


def test_decide_leaves_the_view_as_it_found_it_and_is_deterministic() -> None:
    view = cluster(2)
    victim = run_on(view, job("v", team="b", gpus=8), "node-0000", tuple(range(8)))
    pending = [job(f"p{i}", team="a", klass=SERVING, gpus=4) for i in range(4)]
    before = snapshot(view)
    policy = FairSharePolicy(budget=NO_BUDGET)
    first = policy.decide(100.0, pending, [victim], view)
    assert snapshot(view) == before
    assert policy.decide(100.0, pending, [victim], view) == first
    assert len(first.start) == 2 and [p.job_id for p in first.preempt] == ["v"]


def test_teams_take_turns_by_decayed_gpu_time_over_weight() -> None:
    clock = FakeClock()
    view = cluster(1)
    hog = run_on(view, job("old", team="a", gpus=8), "node-0000", tuple(range(8)))
    observe(view, clock.now, [hog])
    observe(view, clock.advance(3600.0), [])  # team a used 8 GPU-hours
    view.release("old")
    pending = [job(f"a{i}", team="a", submitted_at=0.0) for i in range(8)]
    pending += [job(f"b{i}", team="b", submitted_at=100.0) for i in range(8)]
    decision = FairSharePolicy().decide(clock.now, pending, [], view)
    started = [job_id for job_id, _ in decision.start]
    assert len(started) == 8
    assert sum(job_id.startswith("b") for job_id in started) > sum(
        job_id.startswith("a") for job_id in started
    )
    # With a weight four times b's, a's history weighs a quarter as much and a gets its turn back.
    heavy = FairSharePolicy(quotas=[TeamQuota("a", 0, weight=16.0), TeamQuota("b", 0, weight=1.0)])
    started = [job_id for job_id, _ in heavy.decide(clock.now, pending, [], view).start]
    assert sum(job_id.startswith("a") for job_id in started) > sum(
        job_id.startswith("b") for job_id in started
    )


def test_team_within_guarantee_goes_before_a_borrower_and_no_borrow_waits() -> None:
    view = cluster(1)
    quotas = [TeamQuota("a", 4), TeamQuota("b", 4, can_borrow=False)]
    running = [run_on(view, job("a-run", team="a", gpus=4), "node-0000", (0, 1, 2, 3))]
    pending = [job("a-more", team="a", gpus=4), job("b-first", team="b", gpus=4, submitted_at=50.0)]
    started = [job_id for job_id, _ in FairSharePolicy(quotas).decide(60.0, pending, running, view).start]
    assert started == ["b-first"]
    over = [job("b-big", team="b", gpus=8)]
    assert FairSharePolicy(quotas).decide(60.0, over, [], cluster(1)).start == ()


def test_borrowed_gpus_are_reclaimed_for_a_team_within_its_guarantee() -> None:
    view = cluster(1)
    quotas = [TeamQuota("a", 4), TeamQuota("b", 4)]
    borrower = [
        run_on(view, job(f"b{i}", team="b", gpus=2), "node-0000", (2 * i, 2 * i + 1), started_at=float(i))
        for i in range(4)
    ]
    decision = FairSharePolicy(quotas, NO_BUDGET).decide(100.0, [job("a1", team="a", gpus=4)], borrower, view)
    assert decision.start == ()  # the GPUs are still draining
    # Least work lost since a checkpoint first: the two most recently started.
    assert sorted(p.job_id for p in decision.preempt) == ["b2", "b3"]
    assert "reclaims" in decision.preempt[0].reason
    # Team b within its own guarantee is left alone by another team of the same class.
    view2 = cluster(1)
    inside = [run_on(view2, job("b0", team="b", gpus=4), "node-0000", (0, 1, 2, 3))]
    run_on(view2, job("a0", team="a", gpus=4), "node-0000", (4, 5, 6, 7))
    blocked = FairSharePolicy(quotas, NO_BUDGET).decide(100.0, [job("a1", team="a", gpus=4)], inside, view2)
    assert blocked.preempt == ()


def test_victim_rule_lowest_class_then_most_over_share_then_least_lost_work() -> None:
    view = cluster(1)
    quotas = [TeamQuota("x", 1), TeamQuota("y", 4)]
    interactive = run_on(view, job("i", team="x", klass=INTERACTIVE, gpus=2), "node-0000", (0, 1))
    y_batch = run_on(view, job("y", team="y", gpus=2), "node-0000", (2, 3))
    x_fresh = run_on(view, job("xf", team="x", gpus=2), "node-0000", (4, 5), started_at=90.0)
    x_old = run_on(view, job("xo", team="x", gpus=2), "node-0000", (6, 7), started_at=0.0)
    running = [interactive, y_batch, x_fresh, x_old]
    decision = FairSharePolicy(quotas, NO_BUDGET).decide(
        100.0, [job("s", team="z", klass=SERVING, gpus=2)], running, view
    )
    # Batch before interactive; team x is most over its guarantee; xf has lost 10 s of work, xo 100 s.
    assert [p.job_id for p in decision.preempt] == ["xf"]
    assert "outranks" in decision.preempt[0].reason


def test_preempting_gpus_are_held_for_the_waiting_job_not_given_away() -> None:
    view = cluster(1)
    stopping = run_on(view, job("v", team="b", gpus=8), "node-0000", tuple(range(8)))
    stopping.state = JobState.PREEMPTING
    pending = [job("s", klass=SERVING, gpus=8), job("small", team="c", gpus=1, submitted_at=5.0)]
    decision = FairSharePolicy(budget=NO_BUDGET).decide(10.0, pending, [stopping], view)
    assert decision.start == () and decision.preempt == ()


def test_budget_protects_a_recently_preempted_job_and_caps_a_teams_loss() -> None:
    clock = FakeClock(now=1000.0)
    view = cluster(1)
    victim = run_on(view, job("v", team="b", gpus=8), "node-0000", tuple(range(8)), started_at=900.0)
    victim.preempted_at.append(800.0)
    serving = [job("s", klass=SERVING, gpus=8)]
    budget = PreemptionBudget(min_interval_per_job_s=600.0, max_team_loss_per_hour=1.0, min_team_loss_gpus=8)
    assert FairSharePolicy(budget=budget).decide(clock.now, serving, [victim], view).preempt == ()
    assert [
        p.job_id
        for p in FairSharePolicy(budget=budget).decide(clock.advance(500.0), serving, [victim], view).preempt
    ] == ["v"]
    # Team b already lost 8 GPUs within the hour: with a 50% share of 8 running that is over budget, which
    # stops a discretionary preemption (here with the serving exemption switched off; see
    # test_policy_preemption.py for what the exemptions let through).
    capped = PreemptionBudget(
        min_interval_per_job_s=0.0, max_team_loss_per_hour=0.5, min_team_loss_gpus=0, exempt_serving=False
    )
    view.usage.record_preemption(
        PreemptionRecord(at=clock.now - 60.0, job_id="old", team="b", gpus=8, lost_gpu_s=0.0)
    )
    assert FairSharePolicy(budget=capped).decide(clock.now, serving, [victim], view).preempt == ()


def test_non_preemptible_jobs_are_never_victims() -> None:
    view = cluster(1)
    pinned = run_on(view, job("p", team="b", gpus=8, preemptible=False), "node-0000", tuple(range(8)))
    decision = FairSharePolicy(budget=NO_BUDGET).decide(
        10.0, [job("s", klass=SERVING, gpus=1)], [pinned], view
    )
    assert decision.preempt == () and decision.start == ()


def test_a_waiting_gang_reserves_a_node_and_only_short_jobs_backfill_it() -> None:
    def setup() -> tuple:
        view = cluster(2)
        running = [
            run_on(view, job("r0", gpus=4, runtime=600.0), "node-0000", (0, 1, 2, 3)),
            run_on(view, job("r1", gpus=7, runtime=7200.0), "node-0001", tuple(range(7))),
        ]
        pending = [
            job("gang", gpus=8, runtime=3600.0),
            job("long", gpus=1, runtime=5000.0, submitted_at=1.0),
            job("long2", gpus=1, runtime=5000.0, submitted_at=1.5),
            job("short", gpus=1, runtime=300.0, submitted_at=2.0),
        ]
        return view, running, pending

    view, running, pending = setup()
    placed = dict(FairSharePolicy(reserve_after_s=0.0).decide(0.0, pending, running, view).start)
    # node-0000 has 8 free GPUs at t=600 and is booked for the gang: long takes node-0001's last GPU, long2
    # (ends at t=5000) may not touch node-0000, short (ends at t=300) backfills it.
    assert set(placed) == {"long", "short"}
    assert placed["long"].node_ids == {"node-0001"}
    assert placed["short"].node_ids == {"node-0000"}
    view, running, pending = setup()
    unreserved = dict(FairSharePolicy(max_reservations=0).decide(0.0, pending, running, view).start)
    assert set(unreserved) == {"long", "long2", "short"}
    # A gang that has waited less than reserve_after_s books nothing yet.
    view, running, pending = setup()
    patient = dict(FairSharePolicy(reserve_after_s=300.0).decide(0.0, pending, running, view).start)
    assert set(patient) == {"long", "long2", "short"}


def test_a_gang_books_its_node_from_its_first_decision_by_default() -> None:
    """The default books at once: a node booked from the gang's first decision takes no long job, so it drains
    while the gang waits, and the gang starts when the node's last job ends (fake clock: t=0, then t=600)."""
    clock = FakeClock()
    view = cluster(1)
    running = [run_on(view, job("r0", gpus=4, runtime=600.0), "node-0000", (0, 1, 2, 3))]
    pending = [job("gang", gpus=8, runtime=3600.0), job("long", gpus=1, runtime=5000.0, submitted_at=0.5)]
    policy = FairSharePolicy()
    assert policy.decide(clock.now, pending, running, view).start == ()  # long would delay the gang: it waits
    clock.advance(600.0)
    view.release("r0")
    placed = dict(policy.decide(clock.now, pending, [], view).start)
    assert set(placed) == {"gang"} and placed["gang"].node_ids == {"node-0000"}
