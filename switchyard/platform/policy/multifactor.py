"""Baseline: a Slurm-style multifactor priority with reservations and backfill, no preemption.

Each job's priority is a weighted sum of factors in [0, 1]: age in the queue, the team's fair-share factor
2^(-usage share / entitled share), gang size, and class. Jobs go in priority order; blocked gangs book a node
and shorter jobs backfill in front of them. Serving cannot preempt, so it waits like everyone else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job, Placement, PriorityClass
from switchyard.platform.policy.placement import place_gang
from switchyard.platform.policy.plan import Plan
from switchyard.platform.policy.quotas import TeamQuota
from switchyard.platform.policy.reservations import Reservation, earliest_nodes, fits_before, releases_by_node
from switchyard.platform.policy.scheduler import Decision


@dataclass(frozen=True)
class MultifactorWeights:
    age: float = 1000.0
    fair_share: float = 4000.0
    size: float = 500.0
    priority_class: float = 8000.0
    max_age_s: float = 86400.0
    """Age at which the age factor saturates."""


class MultifactorPriority:
    name = "multifactor"

    def __init__(
        self,
        quotas: Iterable[TeamQuota] = (),
        weights: MultifactorWeights | None = None,
        *,
        max_reservations: int = 4,
    ) -> None:
        self.quotas = {quota.team: quota for quota in quotas}
        self.weights = weights or MultifactorWeights()
        self.max_reservations = max_reservations

    def _fair_share_factor(self, team: str, cluster: ClusterView) -> float:
        teams = sorted(
            set(self.quotas) | {team}
        )  # sorted: float sums in a fixed order, same answer every run
        total_weight = sum(self.quotas[t].weight if t in self.quotas else 1.0 for t in teams)
        share = (self.quotas[team].weight if team in self.quotas else 1.0) / total_weight
        total_usage = sum(cluster.usage.decayed_gpu_s(t) for t in teams)
        used = cluster.usage.decayed_gpu_s(team) / total_usage if total_usage > 0 else 0.0
        return float(2.0 ** (-used / share))

    def decide(
        self, now: float, pending: Sequence[Job], running: Sequence[Job], cluster: ClusterView
    ) -> Decision:
        plan = Plan(cluster)
        starts: list[tuple[str, Placement]] = []
        reservations: list[Reservation] = []
        releases: dict[str, list[tuple[float, int]]] | None = None
        largest = max((job.spec.gpus for job in pending), default=1)
        factors = {team: self._fair_share_factor(team, cluster) for team in {job.team for job in pending}}
        w = self.weights

        def score(job: Job) -> float:
            age = min(max(now - job.submitted_at, 0.0) / w.max_age_s, 1.0)
            klass = int(job.priority_class) / int(PriorityClass.SERVING)
            return (
                w.age * age
                + w.fair_share * factors[job.team]
                + w.size * job.spec.gpus / largest
                + (w.priority_class * klass)
            )

        try:
            for job in sorted(pending, key=lambda j: (-score(j), j.submitted_at, j.id)):
                booked = {node for r in reservations for node in r.node_ids}
                placement = place_gang(job.spec, cluster, allowed=_outside(booked) if booked else None)
                if placement is None and booked:
                    usable = {node for r in reservations if fits_before(job, r, now) for node in r.node_ids}
                    if usable:
                        placement = place_gang(job.spec, cluster, allowed=usable.__contains__)
                if placement is not None:
                    plan.allocate(f"plan:{job.id}", placement)
                    starts.append((job.id, placement))
                    continue
                if len(reservations) < self.max_reservations and job.spec.gpus > 1:
                    if releases is None:
                        releases = releases_by_node(running, cluster, now)
                    spec = job.spec
                    per_worker, workers = (
                        (spec.gpus, 1) if spec.same_node else (spec.gpus_per_worker, spec.workers)
                    )
                    found = earliest_nodes(per_worker, workers, cluster, releases, now, booked)
                    if found is not None:
                        reservations.append(Reservation(job_id=job.id, node_ids=found[0], start_at=found[1]))
        finally:
            plan.rollback()
        return Decision(start=tuple(starts))


def _outside(booked: set[str]) -> Callable[[str], bool]:
    return lambda node: node not in booked
