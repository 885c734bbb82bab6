"""Fair share's GPU-time history survives a control-plane restart: the ledger's snapshot, its SQLite table
(written in one transaction, there after a kill -9), and a control plane re-created over the same file."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from policy_fixtures import FakeClock

from switchyard.platform.cluster_server import fair_share_factory
from switchyard.platform.control_plane import ControlPlane
from switchyard.platform.job_codec import spec_from_dict
from switchyard.platform.job_store import JobStore
from switchyard.platform.jobs import JobState, Placement, WorkerSlot
from switchyard.platform.policy import PreemptionBudget
from switchyard.platform.ray_executor import RayExecutor
from switchyard.platform.ray_nodes import RayNode
from switchyard.platform.usage import UsageLedger, UsageSnapshot

HOUR = 3600.0
NODES = [RayNode("node-a", "10.0.0.1", 8, True)]


def test_a_restored_ledger_continues_as_the_one_it_was_saved_from() -> None:
    clock = FakeClock()
    straight = UsageLedger(half_life_s=HOUR)
    straight.observe(clock.now, {"a": 8})
    clock.advance(HOUR)
    straight.observe(clock.now, {"a": 8, "b": 4})
    saved = straight.snapshot()
    assert saved == UsageSnapshot(HOUR, {"a": pytest.approx(8 * HOUR / math.log(2) / 2)}, {"a": 8, "b": 4})

    restarted = UsageLedger(half_life_s=HOUR)
    assert restarted.snapshot() is None
    restarted.restore(saved)
    clock.advance(HOUR)  # the GPUs held at the save accrue through the restart, as they were still held
    for ledger in (straight, restarted):
        ledger.observe(clock.now, {})
    for team in ("a", "b"):
        assert restarted.decayed_gpu_s(team) == pytest.approx(straight.decayed_gpu_s(team))
    assert restarted.decayed_gpu_s("b") > 0


def test_the_store_keeps_the_last_snapshot_through_a_kill_9(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    script = (
        "import os, signal, sys\n"
        "from switchyard.platform.job_store import JobStore\n"
        "from switchyard.platform.usage import UsageSnapshot\n"
        "store = JobStore(sys.argv[1])\n"
        "store.save_usage(UsageSnapshot(10.0, {'a': 5.0, 'b': 7.5}, {'a': 2}))\n"
        "store.save_usage(UsageSnapshot(20.0, {'a': 6.0, 'c': 1.0}, {'c': 4}))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = subprocess.run([sys.executable, "-c", script, str(db)], capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr
    store = JobStore(db)
    try:  # the second save replaced the first whole: team b is gone
        assert store.usage() == UsageSnapshot(20.0, {"a": 6.0, "c": 1.0}, {"c": 4})
    finally:
        store.close()
    assert JobStore(tmp_path / "empty.db").usage() is None


def plane_on(db: Path, clock: FakeClock) -> ControlPlane:
    return ControlPlane(
        JobStore(db),
        RayExecutor(),
        fair_share_factory(PreemptionBudget()),
        lambda: list(NODES),
        health=None,
        clock=lambda: clock.now,
    )


def test_a_restarted_control_plane_keeps_the_teams_usage(tmp_path: Path) -> None:
    clock = FakeClock()
    db = tmp_path / "jobs.db"
    plane = plane_on(db, clock)
    spec = spec_from_dict(
        {"name": "pretrain", "team": "research", "priority_class": "batch", "gpus_per_worker": 8,
         "command": ["python", "train.py"]}
    )  # fmt: skip
    record = plane.store.add_job(spec, clock.now)
    record.job.state = JobState.RUNNING  # as the reconcile loop writes it before launching
    record.job.placement = Placement((WorkerSlot("node-a", tuple(range(8))),))
    record.job.started_at = clock.now
    plane.store.save(record)
    plane.reconcile()
    clock.advance(HOUR)
    plane.reconcile()
    used = plane.usage.decayed_gpu_s("research")
    assert used == pytest.approx(8 * HOUR / math.log(2) / 2)  # an hour of 8 GPUs, decayed by half-life 1 h
    record = plane.job(record.job.id)
    record.job.state, record.job.placement = JobState.SUCCEEDED, None  # it ends as the plane goes away
    plane.store.save(record)
    plane.store.close()  # the next control plane opens the same file

    restarted = plane_on(db, clock)
    try:
        assert restarted.usage.decayed_gpu_s("research") == pytest.approx(used)
        restarted.reconcile()  # its first pass sees nothing running any more
        clock.advance(HOUR)
        restarted.reconcile()
        assert restarted.usage.decayed_gpu_s("research") == pytest.approx(used / 2)  # it only decays
    finally:
        restarted.store.close()
    fresh = plane_on(tmp_path / "other.db", clock)  # a new cluster starts with no history
    assert fresh.usage.decayed_gpu_s("research") == 0.0 and fresh.usage.snapshot() is None
    fresh.store.close()
