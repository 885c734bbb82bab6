"""Switchyard's policy: strict class priority, weighted fair share on GPU-time, quotas, a preemption budget.

Per decision, classes are served highest first; serving oldest first. Within a lower class, teams take turns
in order of their fair-share key: a team within its guarantee before one that would borrow, then the lowest
(decayed GPU-time + running GPUs x half-life / ln 2) / weight; each team's jobs go oldest first. A job is started on free GPUs (best-fit,
gangs whole), else backfilled onto a reserved node if it ends before that reservation, else it may preempt
(victims by `victims.py`, within the `PreemptionBudget`, whose team cap spares serving and reclaims), else a
gang books the node it can start on soonest.
See docs/platform-policy.md for the rule this defends and how it fails.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job, JobState, Placement, PriorityClass, WorkerSlot
from switchyard.platform.policy.budget import PreemptionBudget
from switchyard.platform.policy.placement import place_gang
from switchyard.platform.policy.plan import Plan
from switchyard.platform.policy.quotas import TeamQuota, quota_for
from switchyard.platform.policy.reservations import (
    Reservation,
    earliest_nodes,
    fits_before,
    releases_by_node,
)
from switchyard.platform.policy.scheduler import Decision, Preemption
from switchyard.platform.policy.victims import Candidate, choose_on_nodes, over_share


@dataclass
class _Round:
    """One decision's working state (discarded when `decide` returns)."""

    now: float
    cluster: ClusterView
    plan: Plan
    running_gpus: dict[str, int]
    starts: list[tuple[str, Placement]] = field(default_factory=list)
    preempts: list[Preemption] = field(default_factory=list)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    preemption_attempts: int = 0
    releases: dict[str, list[tuple[float, int]]] | None = None
    candidates: dict[str, list[Candidate]] | None = None
    allowance: dict[str, int] = field(default_factory=dict)


class FairSharePolicy:
    name = "fair-share"

    def __init__(
        self,
        quotas: Iterable[TeamQuota] = (),
        budget: PreemptionBudget | None = None,
        *,
        max_reservations: int = 4,
        max_preemption_attempts: int = 16,
        reserve_after_s: float = 0.0,
    ) -> None:
        self.quotas = {quota.team: quota for quota in quotas}
        self.budget = budget or PreemptionBudget()
        self.max_reservations = max_reservations
        self.max_preemption_attempts = max_preemption_attempts
        # A gang books nodes once it has waited this long. At once (0) by default: a booked node stops taking
        # long jobs and so drains sooner, which over five synthetic seeds and three Alibaba arrival rates left
        # fewer GPUs idle while gangs waited than a 5-minute wait did, on average (BENCHMARKS.md).
        self.reserve_after_s = reserve_after_s

    # -- the decision --------------------------------------------------------------------------------------------
    def decide(
        self, now: float, pending: Sequence[Job], running: Sequence[Job], cluster: ClusterView
    ) -> Decision:
        plan = Plan(cluster)
        try:
            return self._decide(now, pending, running, cluster, plan)
        finally:
            plan.rollback()

    def _decide(
        self, now: float, pending: Sequence[Job], running: Sequence[Job], cluster: ClusterView, plan: Plan
    ) -> Decision:
        running_gpus: dict[str, int] = {}
        active: list[Job] = []
        preempting = JobState.PREEMPTING
        for job in running:
            if job.state is preempting:
                if job.id in cluster.allocations:
                    plan.release(job.id, draining=True)
            else:
                active.append(job)
                spec = job.spec
                running_gpus[spec.team] = running_gpus.get(spec.team, 0) + spec.gpus
        state = _Round(now=now, cluster=cluster, plan=plan, running_gpus=running_gpus)
        by_class: dict[PriorityClass, list[Job]] = {}
        for job in pending:
            by_class.setdefault(job.priority_class, []).append(job)
        for priority_class in sorted(by_class, reverse=True):
            self._serve_class(state, by_class[priority_class], active)
        return Decision(start=tuple(state.starts), preempt=tuple(state.preempts))

    def _team_key(self, state: _Round, team: str, next_gpus: int) -> tuple[bool, float, str]:
        quota = quota_for(self.quotas, team)
        running = state.running_gpus.get(team, 0)
        ledger = state.cluster.usage
        usage = ledger.decayed_gpu_s(team) + running * ledger.half_life_s / math.log(2)
        return (running + next_gpus > quota.guaranteed_gpus, usage / quota.weight, team)

    def _serve_class(self, state: _Round, jobs: list[Job], active: list[Job]) -> None:
        if jobs[0].priority_class == PriorityClass.SERVING:
            # Serving goes oldest first across teams: it is admitted by preemption within a grace period, and
            # GPUs freed for one replica are only held in the plan, so a team-turn order that changes between
            # decisions would hand them to a younger replica and make the older one preempt (and wait) again.
            for job in sorted(jobs, key=lambda j: (j.submitted_at, j.id)):
                self._try_job(state, job, active)
            return
        queues: dict[str, list[Job]] = {}
        for job in sorted(jobs, key=lambda j: (j.submitted_at, j.id)):
            queues.setdefault(job.team, []).append(job)
        heads = {team: 0 for team in queues}
        heap = [(self._team_key(state, team, queue[0].spec.gpus), team) for team, queue in queues.items()]
        heapq.heapify(heap)
        while heap:
            _, team = heapq.heappop(heap)
            queue = queues[team]
            job = queue[heads[team]]
            heads[team] += 1
            self._try_job(state, job, active)
            if heads[team] < len(queue):
                next_job = queue[heads[team]]
                heapq.heappush(heap, (self._team_key(state, team, next_job.spec.gpus), team))

    def _try_job(self, state: _Round, job: Job, active: list[Job]) -> None:
        quota = quota_for(self.quotas, job.team)
        within = state.running_gpus.get(job.team, 0) + job.spec.gpus <= quota.guaranteed_gpus
        if not within and not quota.can_borrow:
            return
        cluster = state.cluster
        reserved = {node for reservation in state.reservations.values() for node in reservation.node_ids}
        placement = place_gang(
            job.spec, cluster, allowed=(lambda node: node not in reserved) if reserved else None
        )
        if placement is None and reserved:
            usable = {
                node
                for r in state.reservations.values()
                if fits_before(job, r, state.now)
                for node in r.node_ids
            }
            if usable:
                placement = place_gang(job.spec, cluster, allowed=usable.__contains__)
        if placement is not None:
            self._take(state, job, placement)
            return
        if self._preempt_for(state, job, active, within):
            return
        self._reserve_for(state, job, active)

    def _take(self, state: _Round, job: Job, placement: Placement) -> None:
        """Claim the GPUs in the plan; start the job unless some of them are still draining."""
        state.plan.allocate(f"plan:{job.id}", placement)
        state.running_gpus[job.team] = state.running_gpus.get(job.team, 0) + job.spec.gpus
        if not state.plan.touches_draining(placement):
            state.starts.append((job.id, placement))

    # -- preemption ----------------------------------------------------------------------------------------------
    def _candidates(self, state: _Round, active: list[Job]) -> dict[str, list[Candidate]]:
        if state.candidates is None:
            by_node: dict[str, list[Candidate]] = {}
            for job in active:
                if not job.spec.preemptible or self.budget.job_protected(job, state.now):
                    continue
                placement = state.cluster.allocations.get(job.id)
                if placement is None:
                    continue
                quota = quota_for(self.quotas, job.team)
                candidate = Candidate(
                    job=job,
                    over_share=over_share(state.running_gpus.get(job.team, 0), quota.guaranteed_gpus),
                    lost_gpu_s=job.work_at_risk_s(state.now) * job.spec.gpus,
                )
                for node_id in sorted(placement.node_ids):
                    by_node.setdefault(node_id, []).append(candidate)
            for ranked in by_node.values():
                ranked.sort(key=lambda c: c.key)
            state.candidates = by_node
            ledger = state.cluster.usage
            state.allowance = {
                team: self.budget.team_allowance(team, gpus, ledger, state.now)
                for team, gpus in state.running_gpus.items()
            }
        return state.candidates

    def _preempt_for(self, state: _Round, job: Job, active: list[Job], within: bool) -> bool:
        """Free GPUs for `job` by the victim rule, and hold them for it; False when the rule finds none."""
        if state.preemption_attempts >= self.max_preemption_attempts:
            return False
        if job.priority_class == PriorityClass.BATCH and not within:
            return False
        state.preemption_attempts += 1
        candidates = self._candidates(state, active)
        if not candidates:
            return False
        borrowing = {
            team: gpus - quota_for(self.quotas, team).guaranteed_gpus
            for team, gpus in state.running_gpus.items()
        }
        plan = state.plan
        mark = plan.mark()
        chosen: list[Job] = []
        slots: list[WorkerSlot] = []
        need = job.spec.gpus if job.spec.same_node else job.spec.gpus_per_worker
        for _ in range(1 if job.spec.same_node else job.spec.workers):
            choice = choose_on_nodes(
                need,
                job,
                candidates,
                state.cluster,
                waiting_team_within_guarantee=within,
                borrowing=borrowing,
                allowance=state.allowance,
                max_class=job.priority_class,
                capped=self.budget.caps(serving=job.priority_class == PriorityClass.SERVING, reclaim=within),
            )
            if choice is None:
                plan.rollback(mark)
                return False
            for victim in choice.victims:
                plan.release(victim.id, draining=True)
                borrowing[victim.team] = borrowing.get(victim.team, 0) - victim.spec.gpus
                state.allowance[victim.team] = state.allowance.get(victim.team, 0) - victim.spec.gpus
                chosen.append(victim)
            slot = state.cluster.take(choice.node_id, need)
            plan.allocate(f"plan:{job.id}:{len(slots)}", _one(slot))
            slots.append(slot)
        for victim in chosen:
            state.running_gpus[victim.team] -= victim.spec.gpus
            state.preempts.append(Preemption(job_id=victim.id, reason=_reason(victim, job)))
        state.running_gpus[job.team] = state.running_gpus.get(job.team, 0) + job.spec.gpus
        return True

    # -- reservations --------------------------------------------------------------------------------------------
    def _reserve_for(self, state: _Round, job: Job, active: list[Job]) -> None:
        if (
            len(state.reservations) >= self.max_reservations
            or state.now - job.submitted_at < self.reserve_after_s
            or job.spec.gpus < 2
            or job.id in state.reservations
        ):
            return
        if state.releases is None:
            state.releases = releases_by_node(active, state.cluster, state.now)
        taken = {node for reservation in state.reservations.values() for node in reservation.node_ids}
        spec = job.spec
        per_worker, workers = (spec.gpus, 1) if spec.same_node else (spec.gpus_per_worker, spec.workers)
        found = earliest_nodes(per_worker, workers, state.cluster, state.releases, state.now, taken)
        if found is not None:
            state.reservations[job.id] = Reservation(job_id=job.id, node_ids=found[0], start_at=found[1])


def _one(slot: WorkerSlot) -> Placement:
    return Placement(workers=(slot,))


def _reason(victim: Job, waiting: Job) -> str:
    if victim.priority_class < waiting.priority_class:
        return f"{waiting.priority_class.name.lower()} job {waiting.id} outranks {victim.priority_class.name.lower()}"
    return f"team {waiting.team} reclaims GPUs team {victim.team} borrowed, for job {waiting.id}"
