"""Baseline: strict class priority without fair share or quotas.

Higher classes first, oldest first within a class (no team ordering), best-fit, and a waiting job preempts
the newest jobs of lower classes with no budget. It shows what fair share and the budget add.
"""

from __future__ import annotations

from collections.abc import Sequence

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job, JobState, Placement
from switchyard.platform.policy.placement import place_gang
from switchyard.platform.policy.plan import Plan
from switchyard.platform.policy.scheduler import Decision, Preemption


class StrictPriority:
    name = "strict-priority"

    def decide(
        self, now: float, pending: Sequence[Job], running: Sequence[Job], cluster: ClusterView
    ) -> Decision:
        plan = Plan(cluster)
        try:
            return self._decide(pending, running, cluster, plan)
        finally:
            plan.rollback()

    def _decide(
        self, pending: Sequence[Job], running: Sequence[Job], cluster: ClusterView, plan: Plan
    ) -> Decision:
        for job in running:
            if job.state is JobState.PREEMPTING and job.id in cluster.allocations:
                plan.release(job.id, draining=True)
        # Newest lower-class jobs first: they have the least work to lose without checkpoint data to look at.
        victims = sorted(
            (j for j in running if j.state is JobState.RUNNING and j.spec.preemptible),
            key=lambda j: (int(j.priority_class), -(j.started_at or 0.0), j.id),
        )
        starts: list[tuple[str, Placement]] = []
        preempts: list[Preemption] = []
        for job in sorted(pending, key=lambda j: (-int(j.priority_class), j.submitted_at, j.id)):
            placement = place_gang(job.spec, cluster)
            if placement is None:
                placement = self._preempt(job, victims, cluster, plan, preempts)
            if placement is None:
                continue
            plan.allocate(f"plan:{job.id}", placement)
            if not plan.touches_draining(placement):
                starts.append((job.id, placement))
        return Decision(start=tuple(starts), preempt=tuple(preempts))

    def _preempt(
        self, job: Job, victims: list[Job], cluster: ClusterView, plan: Plan, preempts: list[Preemption]
    ) -> Placement | None:
        """Stop lower-class jobs, lowest class and newest first, until the gang fits; undo if it never does."""
        mark = plan.mark()
        stopped: list[Job] = []
        for victim in victims:
            if victim.priority_class >= job.priority_class:
                break
            if victim.id not in cluster.allocations:
                continue
            plan.release(victim.id, draining=True)
            stopped.append(victim)
            placement = place_gang(job.spec, cluster)
            if placement is not None:
                # Keep only the victims on the nodes the gang landed on; the others go back to running.
                plan.rollback(mark)
                nodes = placement.node_ids
                needed = [v for v in stopped if cluster.allocations[v.id].node_ids & nodes]
                for victim in needed:
                    plan.release(victim.id, draining=True)
                placement = place_gang(job.spec, cluster)
                if placement is None:  # another node became the best fit; fall back to all of them
                    plan.rollback(mark)
                    needed = stopped
                    for victim in needed:
                        plan.release(victim.id, draining=True)
                    placement = place_gang(job.spec, cluster)
                preempts.extend(
                    Preemption(
                        job_id=v.id, reason=f"{job.priority_class.name.lower()} job {job.id} outranks it"
                    )
                    for v in needed
                )
                return placement
        plan.rollback(mark)
        return None
