"""Property tests: the free-GPU indexes stay exact, and a decision never double-books or splits a gang."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from policy_fixtures import apply, cluster, job

from switchyard.platform.inventory import ClusterView, GpuHealth
from switchyard.platform.jobs import Job, JobState, PriorityClass
from switchyard.platform.policy import PreemptionBudget, TeamQuota
from switchyard.platform.policy.fair_share import FairSharePolicy
from switchyard.platform.policy.placement import place_gang


def _indexes(view: ClusterView) -> tuple:
    return {n: view.free_gpus(n) for n in view.nodes}, view.total_free, view.largest_free_block


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(0, 7)), max_size=40))
def test_free_indexes_match_a_rebuild_after_any_changes(ops: list[tuple[int, int, int]]) -> None:
    view = cluster(3)
    held: list[str] = []
    for step, (op, gpus, gpu) in enumerate(ops):
        if op == 0:
            placement = place_gang(job("x", gpus=gpus).spec, view)
            if placement is not None:
                view.allocate(f"j{step}", placement)
                held.append(f"j{step}")
        elif op == 1 and held:
            view.release(held.pop(gpu % len(held)))
        elif op == 2:
            node = f"node-{gpu % 3:04d}"
            health = (
                GpuHealth.HEALTHY
                if view.nodes[node].gpu_health[gpu] is not GpuHealth.HEALTHY
                else GpuHealth.REPAIR
            )
            view.set_gpu_health(node, gpu, health)
        elif op == 3:
            node = f"node-{gpu % 3:04d}"
            view.set_cordoned(node, not view.nodes[node].cordoned)
        live = _indexes(view)
        view.reindex()
        assert _indexes(view) == live


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from("abc"), st.integers(0, 2), st.sampled_from([1, 2, 4, 8]), st.integers(1, 2)
        ),
        min_size=1,
        max_size=25,
    )
)
def test_decisions_never_double_book_and_gangs_stay_whole(specs: list[tuple[str, int, int, int]]) -> None:
    view = cluster(3)
    policy = FairSharePolicy(
        [TeamQuota("a", 8), TeamQuota("b", 8), TeamQuota("c", 4)],
        PreemptionBudget(min_interval_per_job_s=0.0, max_team_loss_per_hour=1.0),
    )
    jobs: dict[str, Job] = {}
    for i, (team, klass, gpus, workers) in enumerate(specs):
        jobs[f"j{i}"] = job(
            f"j{i}",
            team,
            PriorityClass(klass),
            gpus,
            workers=workers,
            same_node=gpus * workers <= 8,
            submitted_at=float(i),
            runtime=600.0,
        )
    now = 100.0
    for _ in range(4):
        pending = [j for j in jobs.values() if j.state is JobState.QUEUED]
        running = [j for j in jobs.values() if j.state is JobState.RUNNING]
        decision = policy.decide(now, pending, running, view)
        started = [job_id for job_id, _ in decision.start]
        assert len(started) == len(set(started))
        assert not set(started) & {p.job_id for p in decision.preempt}
        for job_id, placement in decision.start:
            spec = jobs[job_id].spec
            assert placement.gpu_count == spec.gpus and len(placement.workers) == spec.workers
            if spec.same_node:
                assert len(placement.node_ids) == 1
        apply(decision, view, jobs, now)  # raises PlacementConflict on a double booking
        now += 10.0
