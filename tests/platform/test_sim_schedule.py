"""The simulator reproduces small schedules computed by hand, preemption and lost work included."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.platform.jobs import CheckpointPolicy, JobSpec, PriorityClass
from switchyard.platform.policy import PreemptionBudget, TeamQuota
from switchyard.platform.policy.fair_share import FairSharePolicy
from switchyard.platform.policy.fifo import FifoFirstFit
from switchyard.platform.simulator.engine import SimConfig, Simulation
from switchyard.platform.simulator.trace import Trace, TraceJob

NO_BUDGET = PreemptionBudget(min_interval_per_job_s=0.0, max_team_loss_per_hour=1.0)


def _trace() -> Trace:
    """One node of 4 GPUs. A: batch, 4 GPUs, 100 s of work, checkpoints every 30 s, no grace period.
    S: serving, 2 GPUs, 50 s, arrives at 40. B: batch, 2 GPUs, 20 s, arrives at 45."""
    a = JobSpec(
        name="A",
        team="research",
        priority_class=PriorityClass.BATCH,
        gpus_per_worker=4,
        checkpoint=CheckpointPolicy(grace_period_s=0.0, interval_s=30.0),
        expected_runtime_s=100.0,
    )
    s = JobSpec(
        name="S",
        team="product",
        priority_class=PriorityClass.SERVING,
        gpus_per_worker=2,
        preemptible=False,
        expected_runtime_s=50.0,
    )
    b = JobSpec(
        name="B",
        team="product",
        priority_class=PriorityClass.BATCH,
        gpus_per_worker=2,
        expected_runtime_s=20.0,
    )
    return Trace(
        name="hand",
        nodes=1,
        gpus_per_node=4,
        jobs=(TraceJob("A", a, 0.0, 100.0), TraceJob("S", s, 40.0, 50.0), TraceJob("B", b, 45.0, 20.0)),
        quotas=(TeamQuota("research", 2), TeamQuota("product", 2)),
        horizon_s=200.0,
    )


def _runs(sim: Simulation) -> list[tuple[str, float, float, bool]]:
    return sorted((run.job_id, run.start, run.end, run.preempted) for run in sim.runs)


def test_fair_share_schedule_matches_the_hand_computed_one() -> None:
    # t=0 A starts. t=40 S arrives, the node is full: A (batch) is preempted; it checkpointed at 30, so 10 s x 4
    # GPUs are lost and 70 s remain. S starts at 40 on 2 GPUs. A (a 4-GPU gang) books the node for t=90, when
    # S should end. t=45 B arrives: 45 + 20 <= 90, so it backfills the other 2 GPUs, ends at 65. t=90 S ends,
    # A restarts and ends at 90 + 70 = 160.
    trace = _trace()
    sim = Simulation(
        trace, FairSharePolicy(trace.quotas, NO_BUDGET, reserve_after_s=0.0), SimConfig(stop_at_horizon=False)
    )
    result = sim.run()
    assert _runs(sim) == [
        ("A", 0.0, 40.0, True),
        ("A", 90.0, 160.0, False),
        ("B", 45.0, 65.0, False),
        ("S", 40.0, 90.0, False),
    ]
    assert result.gpu_hours_lost == pytest.approx(40.0 / 3600.0)
    assert result.wait_p50_s["serving"] == 0.0
    assert result.jobs_finished == 3
    # Busy GPU-seconds in [0, 200]: A 4x40 + 4x70, S 2x50, B 2x20 = 580 of 800.
    assert result.utilisation == pytest.approx(580.0 / 800.0)


def test_fifo_schedule_matches_the_hand_computed_one() -> None:
    # A runs to 100 uninterrupted; S waits at the head until then, B behind it; both start at 100.
    sim = Simulation(_trace(), FifoFirstFit(), SimConfig(stop_at_horizon=False))
    result = sim.run()
    assert _runs(sim) == [("A", 0.0, 100.0, False), ("B", 100.0, 120.0, False), ("S", 100.0, 150.0, False)]
    assert result.wait_p50_s["serving"] == 60.0
    assert result.gpu_hours_lost == 0.0


def test_a_grace_period_holds_the_gpus_and_the_serving_job_waits_for_it() -> None:
    base = _trace()
    a = base.jobs[0]
    graceful = TraceJob(
        "A",
        JobSpec(**{**a.spec.__dict__, "checkpoint": CheckpointPolicy(grace_period_s=5.0, interval_s=30.0)}),
        0.0,
        100.0,
    )
    trace = Trace(**{**base.__dict__, "jobs": (graceful, *base.jobs[1:])})
    sim = Simulation(
        trace, FairSharePolicy(trace.quotas, NO_BUDGET, reserve_after_s=0.0), SimConfig(stop_at_horizon=False)
    )
    sim.run()
    # A is told to stop at 40 and holds the node until 45; S starts then, B backfills beside it, A resumes
    # when S ends at 95 with 100 - 30 = 70 s of work left.
    assert _runs(sim) == [
        ("A", 0.0, 40.0, True),
        ("A", 95.0, 165.0, False),
        ("B", 45.0, 65.0, False),
        ("S", 45.0, 95.0, False),
    ]


def test_results_do_not_depend_on_the_string_hash_seed() -> None:
    """Sets of node and team names must never decide an outcome: two hash seeds, one answer."""
    import os
    import subprocess
    import sys

    script = (
        "from switchyard.platform.simulator.synthetic import synthetic_trace, SyntheticConfig\n"
        "from switchyard.platform.simulator.engine import Simulation, SimConfig\n"
        "from switchyard.platform.policy.fair_share import FairSharePolicy\n"
        "t = synthetic_trace(SyntheticConfig(nodes=16, hours=6.0, load=1.2, seed=5, warmup_hours=1.0))\n"
        "r = Simulation(t, FairSharePolicy(t.quotas), SimConfig(decide_every_s=10)).run()\n"
        "print(repr((r.utilisation, r.gpu_hours_lost, r.jain, r.gang_idle_gpu_fraction, r.wait_p99_s)))\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
