"""The three baselines: FIFO blocks at its head, strict priority preempts without a budget, multifactor ranks."""

from __future__ import annotations

from policy_fixtures import BATCH, INTERACTIVE, SERVING, FakeClock, cluster, job, observe, run_on, snapshot

from switchyard.platform.policy import TeamQuota
from switchyard.platform.policy.fifo import FifoFirstFit
from switchyard.platform.policy.multifactor import MultifactorPriority
from switchyard.platform.policy.strict_priority import StrictPriority


def test_fifo_head_of_line_blocks_and_first_fit_takes_the_first_node() -> None:
    view = cluster(2)
    run_on(view, job("x", gpus=4), "node-0001", (0, 1, 2, 3))
    pending = [
        job("one", gpus=1),
        job("big", gpus=8, submitted_at=1.0),
        job("late", gpus=1, submitted_at=2.0),
    ]
    decision = FifoFirstFit().decide(5.0, pending, [], view)
    assert [(job_id, p.node_ids) for job_id, p in decision.start] == [("one", {"node-0000"})]


def test_strict_priority_preempts_the_newest_lower_class_job_without_a_budget() -> None:
    view = cluster(1)
    old = run_on(view, job("old", gpus=4), "node-0000", (0, 1, 2, 3), started_at=0.0)
    new = run_on(view, job("new", gpus=4), "node-0000", (4, 5, 6, 7), started_at=50.0)
    old.preempted_at.append(99.0)  # no budget: being preempted a second ago protects nothing
    before = snapshot(view)
    decision = StrictPriority().decide(100.0, [job("s", klass=SERVING, gpus=4)], [old, new], view)
    assert [p.job_id for p in decision.preempt] == ["new"]
    assert snapshot(view) == before
    # Same class never preempts.
    assert StrictPriority().decide(100.0, [job("b", klass=BATCH, gpus=4)], [old, new], view).preempt == ()


def test_strict_priority_ignores_teams_within_a_class() -> None:
    clock = FakeClock()
    view = cluster(1)
    observe(view, clock.now, [])
    pending = [job(f"a{i}", team="a", submitted_at=float(i)) for i in range(8)]
    pending.append(job("b0", team="b", submitted_at=100.0))
    started = [job_id for job_id, _ in StrictPriority().decide(clock.advance(200), pending, [], view).start]
    assert started == [f"a{i}" for i in range(8)]


def test_multifactor_ranks_class_then_fair_share_and_never_preempts() -> None:
    clock = FakeClock()
    view = cluster(1)
    hog = run_on(view, job("hog", team="a", gpus=8), "node-0000", tuple(range(8)))
    observe(view, clock.now, [hog])
    observe(view, clock.advance(3600.0), [hog])
    policy = MultifactorPriority(quotas=[TeamQuota("a", 4), TeamQuota("b", 4)])
    blocked = policy.decide(clock.now, [job("s", klass=SERVING, gpus=1)], [hog], view)
    assert blocked.start == () and blocked.preempt == ()
    view.release("hog")
    pending = [job(f"a{i}", team="a", klass=INTERACTIVE) for i in range(4)]
    pending += [job(f"b{i}", team="b", submitted_at=10.0) for i in range(8)]
    started = [job_id for job_id, _ in policy.decide(clock.now, pending, [], view).start]
    assert started[:4] == ["a0", "a1", "a2", "a3"]  # class outweighs fair share
    assert sorted(started[4:]) == ["b0", "b1", "b2", "b3"]
