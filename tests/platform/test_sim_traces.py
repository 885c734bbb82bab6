"""Trace loaders: the synthetic generator's mix and determinism, and the Alibaba slice kept in the repo."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.platform.jobs import PriorityClass
from switchyard.platform.policy.fair_share import FairSharePolicy
from switchyard.platform.simulator.alibaba import AlibabaSlice, TraceFormatError, load_alibaba
from switchyard.platform.simulator.engine import SimConfig, Simulation
from switchyard.platform.simulator.synthetic import SyntheticConfig, synthetic_trace

SLICE = Path(__file__).resolve().parents[2] / "benchmarks/traces/alibaba_openb_gpu_pods.csv"


def test_synthetic_trace_is_deterministic_and_has_the_asked_mix() -> None:
    cfg = SyntheticConfig(nodes=64, hours=12.0, load=1.0, seed=7)
    trace = synthetic_trace(cfg)
    assert trace == synthetic_trace(cfg)
    assert trace.gpus == 512
    work = {klass: 0.0 for klass in PriorityClass}
    for job in trace.jobs:
        work[job.spec.priority_class] += job.spec.gpus * min(job.work_s, 12 * 3600)
        assert job.spec.gpus_per_worker <= 8 and 0 <= job.submit_at <= 12 * 3600
        assert job.spec.expected_runtime_s is not None and job.spec.expected_runtime_s >= job.work_s
        assert job.spec.preemptible == (job.spec.priority_class is not PriorityClass.SERVING)
    total = sum(work.values())
    assert total == pytest.approx(512 * 12 * 3600, rel=0.1)
    assert work[PriorityClass.BATCH] / total == pytest.approx(0.65, abs=0.08)
    assert any(not job.spec.same_node and job.spec.workers > 1 for job in trace.jobs)
    assert {quota.team for quota in trace.quotas} == {"search", "chat", "research", "ads"}


def test_alibaba_slice_maps_classes_compresses_arrivals_and_replays() -> None:
    once = load_alibaba(AlibabaSlice(path=SLICE, compress=100.0, repeat=1))
    twice = load_alibaba(AlibabaSlice(path=SLICE, compress=100.0, repeat=2))
    assert len(twice.jobs) == 2 * len(once.jobs) > 5000
    classes = {job.spec.priority_class for job in once.jobs}
    assert classes == set(PriorityClass)
    assert all(
        not job.spec.preemptible for job in once.jobs if job.spec.priority_class is PriorityClass.SERVING
    )
    assert max(job.work_s for job in once.jobs) <= 6 * 3600
    span = max(job.submit_at for job in once.jobs)
    assert span == pytest.approx(load_alibaba(AlibabaSlice(path=SLICE, compress=50.0, repeat=1)).end_s / 2)
    assert "Alibaba" in once.origin


def test_a_csv_without_the_needed_columns_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,num_gpu\nx,1\n")
    with pytest.raises(TraceFormatError):
        load_alibaba(AlibabaSlice(path=bad))


def test_ten_thousand_gpus_simulate_with_the_fair_share_policy() -> None:
    """Scale, not speed: 10,240 GPUs, a short window, every job accounted for."""
    trace = synthetic_trace(SyntheticConfig(nodes=1280, hours=0.5, load=1.0, seed=3, warmup_hours=0.0))
    sim = Simulation(trace, FairSharePolicy(trace.quotas), SimConfig(decide_every_s=30.0))
    result = sim.run()
    assert result.gpus == 10_240
    assert len(sim.pending) + len(sim.running) + result.jobs_finished == len(trace.jobs)
    assert 0.0 < result.utilisation <= 1.0
    assert sim.cluster.total_free + sim.busy == 10_240
