"""The control plane: the job queue in SQLite, and a reconcile loop that applies the policy's decisions on Ray.

Each pass reads Ray's nodes and the agents' heartbeats, ends the runs that ended, requeues the jobs of lost
nodes, moves jobs off faulty GPUs, asks the policy what to start and what to preempt, and applies that: every
change is written to the store before the executor acts on it. A control plane that restarts finds the runs
it had started gone with its Ray driver (worker actors are owned by it) and requeues those jobs, which resume
from their checkpoints like preempted ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from switchyard.platform.errors import (
    JobFinishedError,
    JobSpecError,
    NodeNotFoundError,
    UnknownTeamError,
)
from switchyard.platform.health_monitor import HealthMonitor
from switchyard.platform.inventory import ClusterView, GpuHealth, Node
from switchyard.platform.job_store import ACTIVE_STATES, GpuHealthRecord, JobRecord, JobStore, NodeAdmin
from switchyard.platform.jobs import CheckpointPolicy, JobSpec, JobState, Placement
from switchyard.platform.node_agent import BurnInResult
from switchyard.platform.policy import Scheduler, TeamQuota
from switchyard.platform.ray_executor import RayExecutor, RunEnd, RunOutcome
from switchyard.platform.ray_nodes import RayNode
from switchyard.platform.repair import BurnInVerdict, RepairAction, next_gpu_health
from switchyard.platform.usage import PreemptionRecord, UsageLedger, gpus_by_team

logger = logging.getLogger(__name__)

PolicyFactory = Callable[[Mapping[str, TeamQuota]], Scheduler]
"""Builds the policy for the current quotas (they change at run time with `quota set`)."""
STOP_WITHOUT_CHECKPOINT = CheckpointPolicy(signal="SIGTERM", grace_period_s=10.0)
"""How a job that declared no checkpoint policy is stopped (cancel, drain, a faulty GPU)."""


@dataclass(frozen=True)
class GpuStatus:
    index: int
    health: GpuHealth
    reason: str
    job_id: str | None


@dataclass(frozen=True)
class NodeStatus:
    id: str
    address: str
    alive: bool
    """Ray reports it alive and it answers heartbeats."""
    cordoned: bool
    cordon_reason: str
    gpus: tuple[GpuStatus, ...]
    last_heartbeat_age_s: float | None


@dataclass
class _Pass:
    """What one reconcile pass read, shared by its steps."""

    now: float
    nodes: dict[str, RayNode]
    live: set[str]
    admin: dict[str, NodeAdmin]
    holders: list[JobRecord] = field(default_factory=list)


class ControlPlane:
    def __init__(
        self,
        store: JobStore,
        executor: RayExecutor,
        policy_factory: PolicyFactory,
        node_source: Callable[[], list[RayNode]],
        health: HealthMonitor | None = None,
        clock: Callable[[], float] = time.time,
        usage: UsageLedger | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.policy_factory = policy_factory
        self.node_source = node_source
        self.health = health
        self.clock = clock
        self.usage = usage or UsageLedger()
        self._lock = threading.RLock()
        self._nodes: dict[str, RayNode] = {}
        stored = store.usage()
        if stored is not None and self.usage.snapshot() is None:
            self.usage.restore(stored)  # fair share remembers the teams' GPU-time across a restart
        self._requeue_orphans()
        self._replay_preemptions()

    # -- the API's operations -------------------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobRecord:
        """Queue a job; refuse one whose team has no quota or whose gang no node of the cluster could hold."""
        with self._lock:
            if spec.team not in self.store.quotas():
                raise UnknownTeamError(
                    f"team {spec.team!r} has no quota; set one with `switchyard cluster quota set {spec.team} "
                    "--gpus N`"
                )
            self._check_fits_somewhere(spec)
            record = self.store.add_job(spec, self.clock())
        logger.info("job %s (%s, team %s) queued", record.job.id, spec.name, spec.team)
        return record

    def cancel(self, job_id: str) -> JobRecord:
        with self._lock:
            record = self.store.get(job_id)
            state = record.job.state
            if state not in ACTIVE_STATES:
                raise JobFinishedError(f"job {job_id} has already ended ({state.value})")
            record.job.state = JobState.CANCELLED
            record.message = "cancelled"
            if record.job.placement is None:
                record.finished_at = self.clock()
            self.store.save(record)
            if record.job.placement is not None:
                policy = record.job.spec.checkpoint or STOP_WITHOUT_CHECKPOINT
                self.executor.stop(job_id, policy.signal, policy.grace_period_s)
            return record

    def set_quota(self, quota: TeamQuota) -> None:
        self.store.set_quota(quota)

    def cordon(self, node_id: str, reason: str = "cordoned by an operator") -> None:
        with self._lock:
            self._known_node(node_id)
            self.store.set_node_cordon(node_id, True, reason)

    def uncordon(self, node_id: str) -> None:
        with self._lock:
            self._known_node(node_id)
            self.store.set_node_cordon(node_id, False, "")

    def drain(self, node_id: str) -> list[str]:
        """Cordon the node and preempt its jobs (they checkpoint and resume elsewhere); their ids."""
        with self._lock:
            self.cordon(node_id, "drained by an operator")
            moved = []
            for record in self.store.holding_gpus():
                job = record.job
                if job.state is JobState.RUNNING and job.placement and node_id in job.placement.node_ids:
                    self._stop_run(record, f"node {node_id} drained", self.clock(), by_policy=False)
                    moved.append(job.id)
            return moved

    def repairs(self) -> list[GpuHealthRecord]:
        """The GPUs out of service (cordoned, in repair, burning in), longest out first: the repair queue."""
        records = [gpu for node in self.store.node_admin().values() for gpu in node.gpus.values()]
        return sorted(
            (gpu for gpu in records if gpu.health is not GpuHealth.HEALTHY), key=lambda gpu: gpu.since
        )

    def jobs(self) -> list[JobRecord]:
        return self.store.jobs()

    def job(self, job_id: str) -> JobRecord:
        return self.store.get(job_id)

    def nodes(self) -> list[NodeStatus]:
        with self._lock:
            nodes = self._nodes or {node.id: node for node in self.node_source()}
            admin = self.store.node_admin()
            held = {
                (slot.node_id, gpu): record.job.id
                for record in self.store.holding_gpus()
                for slot in record.job.placement.workers  # type: ignore[union-attr]
                for gpu in slot.gpus
            }
            statuses = []
            for node in nodes.values():
                node_admin = admin.get(node.id, NodeAdmin(node.id))
                gpus = []
                for index in range(node.gpu_count):
                    record = node_admin.gpus.get(index)
                    health = GpuHealth.HEALTHY if record is None else record.health
                    gpus.append(
                        GpuStatus(
                            index, health, "" if record is None else record.reason, held.get((node.id, index))
                        )
                    )
                statuses.append(
                    NodeStatus(
                        id=node.id,
                        address=node.address,
                        alive=self._alive(node),
                        cordoned=node_admin.cordoned,
                        cordon_reason=node_admin.reason,
                        gpus=tuple(gpus),
                        last_heartbeat_age_s=None
                        if self.health is None
                        else self.health.last_heartbeat_age(node.id),
                    )
                )
            return statuses

    # -- the loop ------------------------------------------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass; never blocks on a job (every Ray call it makes returns at once)."""
        with self._lock:
            now = self.clock()
            nodes = {node.id: node for node in self.node_source()}
            self._nodes = nodes
            burn_ins: list[BurnInResult] = []
            if self.health is not None:
                burn_ins = self.health.tick(
                    {node.id: node.gpu_count for node in nodes.values() if node.alive}
                )
            state = _Pass(now, nodes, {node.id for node in nodes.values() if self._alive(node)}, {})
            for outcome in self.executor.poll():
                self._end_run(outcome, now)
            self._requeue_lost(state)
            state.admin = self.store.node_admin()
            state.holders = self.store.holding_gpus()
            self._repair(state, burn_ins)
            self._refresh_endpoints(state.holders)
            self._note_checkpoints(state.holders)
            self._schedule(state)

    def run_forever(self, interval_s: float, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.reconcile()
            except Exception:
                logger.exception("a reconcile pass failed; the next one retries")
            stop.wait(interval_s)

    def shutdown(self) -> None:
        with self._lock:
            self.executor.shutdown()
            if self.health is not None:
                self.health.shutdown()

    # -- steps ---------------------------------------------------------------------------------------------------

    def _end_run(self, outcome: RunOutcome, now: float) -> None:
        record = self.store.get(outcome.job_id)
        job = record.job
        if record.attempts != outcome.attempt or job.placement is None:
            return  # a run the store has already moved on from (requeued when its node was lost)
        self._account(record, now)
        if outcome.end is RunEnd.LOST and self.health is not None:
            for node_id in job.placement.node_ids:
                self.health.mark_suspect(node_id)
        if job.state is JobState.CANCELLED:
            record.finished_at = now
        elif job.state is JobState.PREEMPTING or outcome.end in (RunEnd.STOPPED, RunEnd.LOST):
            job.state = JobState.QUEUED
            record.message = f"{record.message or outcome.message}; requeued to resume from its checkpoint"
        elif outcome.end is RunEnd.SUCCEEDED:
            job.state = JobState.SUCCEEDED
            record.finished_at = now
            record.message = outcome.message
        else:
            job.state = JobState.FAILED
            record.finished_at = now
            record.message = outcome.message
        job.placement = None
        job.started_at = None
        job.last_checkpoint_at = None
        record.endpoints = ()
        self.store.save(record)
        logger.info(
            "job %s: run %d %s (%s) -> %s", job.id, outcome.attempt, outcome.end, outcome.message, job.state
        )

    def _requeue_lost(self, state: _Pass) -> None:
        for record in self.store.holding_gpus():
            placement = record.job.placement
            lost = sorted(node for node in placement.node_ids if node not in state.live)  # type: ignore[union-attr]
            if not lost:
                continue
            self.executor.forget(record.job.id)
            self._account(record, state.now)
            job = record.job
            if job.state is JobState.CANCELLED:
                record.finished_at = state.now
            else:
                job.state = JobState.QUEUED
                record.message = f"node {', '.join(lost)} lost; requeued to resume from its checkpoint"
            job.placement = None
            job.started_at = None
            job.last_checkpoint_at = None
            record.endpoints = ()
            self.store.save(record)
            logger.warning("job %s: %s", job.id, record.message)

    def _repair(self, state: _Pass, burn_ins: list[BurnInResult]) -> None:
        if self.health is None:
            return
        verdicts = {
            (result.node_id, gpu): BurnInVerdict(result.failures.get(gpu))
            for result in burn_ins
            for gpu in result.gpus
        }
        held: dict[tuple[str, int], list[JobRecord]] = {}
        for record in state.holders:
            for slot in record.job.placement.workers:  # type: ignore[union-attr]
                for gpu in slot.gpus:
                    held.setdefault((slot.node_id, gpu), []).append(record)
        for node_id in state.live:
            if not self.health.heard_from(node_id):
                continue
            faults = self.health.faults(node_id)
            admin = state.admin.get(node_id, NodeAdmin(node_id))
            burning: list[int] = []
            for gpu in range(state.nodes[node_id].gpu_count):
                current = admin.gpus.get(gpu)
                health = GpuHealth.HEALTHY if current is None else current.health
                reason = "" if current is None else current.reason
                holders = held.get((node_id, gpu), [])
                step = next_gpu_health(
                    health, reason, faults.get(gpu), bool(holders), verdicts.get((node_id, gpu))
                )
                if (step.health, step.reason) != (health, reason):
                    self.store.set_gpu_health(node_id, gpu, step.health, step.reason, state.now)
                    logger.warning(
                        "node %s GPU %d: %s -> %s (%s)", node_id, gpu, health, step.health, step.reason
                    )
                if step.action is RepairAction.MOVE_JOBS:
                    for record in holders:
                        if record.job.state is JobState.RUNNING:
                            why = f"GPU {gpu} of node {node_id} cordoned: {step.reason}"
                            self._stop_run(record, why, state.now, by_policy=False)
                if step.health is GpuHealth.BURN_IN:
                    burning.append(gpu)
            if burning and not self.health.burn_in_running(node_id):
                self.health.start_burn_in(node_id, burning)
        state.admin = self.store.node_admin()

    def _refresh_endpoints(self, holders: list[JobRecord]) -> None:
        for record in holders:
            if record.job.state is JobState.RUNNING:
                endpoints = self.executor.endpoints(record.job.id)
                if endpoints != record.endpoints:
                    record.endpoints = endpoints
                    self.store.save(record)

    def _note_checkpoints(self, holders: list[JobRecord]) -> None:
        newer = self.executor.checkpoints()
        for record in holders:
            at = newer.get(record.job.id)
            if at is not None and record.job.state is JobState.RUNNING:
                record.job.last_checkpoint_at = at
                self.store.save(record)

    def _schedule(self, state: _Pass) -> None:
        holders = self.store.holding_gpus()
        running = [record.job for record in holders if record.job.state is not JobState.CANCELLED]
        pending = [record.job for record in self.store.jobs([JobState.QUEUED])]
        view = self._cluster_view(state, holders)
        self.usage.observe(state.now, gpus_by_team(running))
        snapshot = self.usage.snapshot()
        if snapshot is not None:
            self.store.save_usage(snapshot)  # durable before the policy decides with it
        if not pending:
            return
        policy = self.policy_factory(self.store.quotas())
        decision = policy.decide(state.now, pending, running, view)
        by_id = {record.job.id: record for record in holders}
        for preemption in decision.preempt:
            record = by_id.get(preemption.job_id)
            if record is not None and record.job.state is JobState.RUNNING:
                self._stop_run(record, f"preempted: {preemption.reason}", state.now, by_policy=True)
        for job_id, placement in decision.start:
            self._start_run(self.store.get(job_id), placement, state.now)

    def _start_run(self, record: JobRecord, placement: Placement, now: float) -> None:
        job = record.job
        job.state = JobState.RUNNING
        job.placement = placement
        job.started_at = now
        job.last_checkpoint_at = None
        record.attempts += 1
        record.message = ""
        self.store.save(record)  # the intent first: a restart finds the job RUNNING there and requeues it
        try:
            self.executor.launch(job.id, record.attempts, job.spec, placement)
        except Exception as error:  # Ray refused the group or the actors: the job waits for the next pass
            logger.exception("job %s: launch failed", job.id)
            job.state = JobState.QUEUED
            job.placement = None
            job.started_at = None
            record.message = f"launch failed: {error}"
            self.store.save(record)

    def _stop_run(self, record: JobRecord, reason: str, now: float, *, by_policy: bool) -> None:
        """Checkpoint signal now, kill after the grace period; the job requeues when its run ends."""
        job = record.job
        job.state = JobState.PREEMPTING
        record.message = reason
        if by_policy:
            job.preempted_at.append(now)
            self.usage.record_preemption(
                PreemptionRecord(
                    now, job.id, job.team, job.spec.gpus, job.work_at_risk_s(now) * job.spec.gpus
                )
            )
        self.store.save(record)
        policy = job.spec.checkpoint or STOP_WITHOUT_CHECKPOINT
        self.executor.stop(job.id, policy.signal, policy.grace_period_s)
        logger.info("job %s: %s (%s, %.0f s grace)", job.id, reason, policy.signal, policy.grace_period_s)

    # -- helpers -------------------------------------------------------------------------------------------------

    def _account(self, record: JobRecord, now: float) -> None:
        if record.job.started_at is not None:
            record.job.gpu_seconds += max(0.0, now - record.job.started_at) * record.job.spec.gpus

    def _alive(self, node: RayNode) -> bool:
        return node.alive and (self.health is None or self.health.responsive(node.id))

    def _cluster_view(self, state: _Pass, holders: Sequence[JobRecord]) -> ClusterView:
        nodes = {}
        for node in state.nodes.values():
            admin = state.admin.get(node.id, NodeAdmin(node.id))
            nodes[node.id] = Node(
                id=node.id,
                gpu_count=node.gpu_count,
                gpu_health={gpu: record.health for gpu, record in admin.gpus.items() if gpu < node.gpu_count},
                cordoned=admin.cordoned,
                # A suspect node keeps its jobs but gets no new ones until its agent answers again.
                alive=node.id in state.live
                and not (self.health is not None and self.health.suspect(node.id)),
            )
        allocations = {record.job.id: record.job.placement for record in holders if record.job.placement}
        return ClusterView(nodes=nodes, allocations=allocations, usage=self.usage)

    def _check_fits_somewhere(self, spec: JobSpec) -> None:
        nodes = self._nodes or {node.id: node for node in self.node_source()}
        sizes = [node.gpu_count for node in nodes.values() if node.alive]
        if not sizes:
            return  # no node yet: the job waits for one
        if spec.gpus_per_worker > max(sizes):
            raise JobSpecError(
                f"job {spec.name!r}: a worker of {spec.gpus_per_worker} GPUs fits no node (the largest has "
                f"{max(sizes)})"
            )
        if spec.same_node and spec.gpus > max(sizes):
            raise JobSpecError(
                f"job {spec.name!r}: a gang of {spec.gpus} GPUs on one node fits no node (the largest has "
                f"{max(sizes)}); set same_node to false to spread it"
            )
        if spec.gpus > sum(sizes):
            raise JobSpecError(
                f"job {spec.name!r}: {spec.gpus} GPUs is more than the cluster has ({sum(sizes)})"
            )

    def check_gpu(self, node_id: str, gpu: int) -> None:
        """Raise NodeNotFoundError unless the node exists and has that GPU."""
        node = self._known_node(node_id)
        if not 0 <= gpu < node.gpu_count:
            raise NodeNotFoundError(f"node {node_id} has no GPU {gpu} (it has {node.gpu_count})")

    def _known_node(self, node_id: str) -> RayNode:
        nodes = self._nodes or {node.id: node for node in self.node_source()}
        if node_id not in nodes:
            raise NodeNotFoundError(f"no node {node_id!r}; `switchyard cluster nodes` lists them")
        return nodes[node_id]

    def _replay_preemptions(self) -> None:
        """The preemption budget's last hour, rebuilt from the store (the work each lost is not kept: 0)."""
        since = self.clock() - self.usage.window_s
        records = [
            PreemptionRecord(at, record.job.id, record.job.team, record.job.spec.gpus, 0.0)
            for record in self.store.jobs()
            for at in record.job.preempted_at
            if at >= since
        ]
        for preemption in sorted(records, key=lambda preemption: preemption.at):
            self.usage.record_preemption(preemption)

    def _requeue_orphans(self) -> None:
        """Jobs a previous control plane left RUNNING or PREEMPTING: their runs died with it."""
        running = self.executor.running()
        for record in self.store.holding_gpus():
            if record.job.id in running:
                continue
            job = record.job
            self._account(record, self.clock())
            if job.state is JobState.CANCELLED:
                record.finished_at = self.clock()
            else:
                job.state = JobState.QUEUED
                record.message = "the control plane restarted; requeued to resume from its checkpoint"
            job.placement = None
            job.started_at = None
            self.store.save(record)
