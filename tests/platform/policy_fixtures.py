"""Small builders for policy tests: jobs, a cluster, a fake clock, and applying a decision to the view."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.platform.inventory import ClusterView, uniform_cluster
from switchyard.platform.jobs import CheckpointPolicy, Job, JobSpec, JobState, PriorityClass
from switchyard.platform.policy.scheduler import Decision
from switchyard.platform.usage import gpus_by_team

BATCH, INTERACTIVE, SERVING = PriorityClass.BATCH, PriorityClass.INTERACTIVE, PriorityClass.SERVING


@dataclass
class FakeClock:
    now: float = 0.0

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def job(
    job_id: str,
    team: str = "a",
    klass: PriorityClass = BATCH,
    gpus: int = 1,
    *,
    workers: int = 1,
    same_node: bool = True,
    submitted_at: float = 0.0,
    runtime: float | None = None,
    preemptible: bool = True,
    checkpoint_interval: float | None = None,
) -> Job:
    spec = JobSpec(
        name=job_id,
        team=team,
        priority_class=klass,
        gpus_per_worker=gpus,
        workers=workers,
        same_node=same_node,
        preemptible=preemptible,
        checkpoint=CheckpointPolicy(interval_s=checkpoint_interval) if checkpoint_interval else None,
        expected_runtime_s=runtime,
    )
    return Job(id=job_id, spec=spec, submitted_at=submitted_at)


def cluster(nodes: int = 2, gpus_per_node: int = 8) -> ClusterView:
    return uniform_cluster(nodes, gpus_per_node)


def run_on(view: ClusterView, running: Job, node: str, gpus: tuple[int, ...], started_at: float = 0.0) -> Job:
    """Put a job on given GPUs as if it had been started earlier."""
    from switchyard.platform.jobs import Placement, WorkerSlot

    placement = Placement(workers=(WorkerSlot(node_id=node, gpus=gpus),))
    view.allocate(running.id, placement)
    running.state = JobState.RUNNING
    running.placement = placement
    running.started_at = started_at
    return running


def apply(decision: Decision, view: ClusterView, jobs: dict[str, Job], now: float) -> None:
    """What a control plane does with a decision: preempted jobs release, started jobs allocate."""
    for preemption in decision.preempt:
        victim = jobs[preemption.job_id]
        view.release(victim.id)
        victim.state = JobState.QUEUED
        victim.placement = None
        victim.started_at = None
        victim.preempted_at.append(now)
    for job_id, placement in decision.start:
        started = jobs[job_id]
        view.allocate(job_id, placement)
        started.state = JobState.RUNNING
        started.placement = placement
        started.started_at = now


def observe(view: ClusterView, now: float, running: list[Job]) -> None:
    view.usage.observe(now, gpus_by_team(running))


def snapshot(view: ClusterView) -> tuple[dict, int, list[str]]:
    """Everything decide() must leave as it found it."""
    return dict(view.allocations), view.total_free, list(view.nodes_with_free(1))
