"""Baseline: first come, first served, first-fit, no preemption.

The head of the queue blocks everyone behind it (no skipping), which is what "FIFO" means to the users of
simple batch queues, and the reason a cluster needs a policy at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job, Placement
from switchyard.platform.policy.placement import Fit, place_gang
from switchyard.platform.policy.plan import Plan
from switchyard.platform.policy.scheduler import Decision


class FifoFirstFit:
    name = "fifo-first-fit"

    def decide(
        self, now: float, pending: Sequence[Job], running: Sequence[Job], cluster: ClusterView
    ) -> Decision:
        plan = Plan(cluster)
        starts: list[tuple[str, Placement]] = []
        try:
            for job in sorted(pending, key=lambda j: (j.submitted_at, j.id)):
                placement = place_gang(job.spec, cluster, fit=Fit.FIRST)
                if placement is None:
                    break
                plan.allocate(f"plan:{job.id}", placement)
                starts.append((job.id, placement))
        finally:
            plan.rollback()
        return Decision(start=tuple(starts))
