"""The discrete-event simulator: jobs arrive, run their true duration, and are preempted by the policy.

Time jumps from event to event (arrival, finish, end of a preemption's grace period, and a periodic tick
while jobs wait, so time-based rules such as the preemption budget get a chance to change their answer).
After the events of an instant the policy decides once; when a preemption frees GPUs at once (no grace
period) it decides again at the same instant. A preempted job loses the work done since its last
checkpoint: a job with a checkpoint interval keeps whole intervals, a job that checkpoints on the signal
keeps everything, a job without a checkpoint policy starts over. Per-team and cluster counters are kept
incrementally so a step costs what the policy costs, not a scan of 10,000 GPUs.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from enum import IntEnum

from switchyard.platform.inventory import uniform_cluster
from switchyard.platform.jobs import Job, JobState, Placement
from switchyard.platform.policy.scheduler import Decision, Scheduler
from switchyard.platform.simulator.metrics import MetricsRecorder, SimResult
from switchyard.platform.simulator.trace import Trace, TraceJob
from switchyard.platform.usage import PreemptionRecord, UsageLedger


class _Event(IntEnum):
    """Order within one instant: GPUs come back before new jobs arrive, and the policy decides last."""

    FINISH = 0
    RELEASE = 1
    ARRIVE = 2
    DECIDE = 3


@dataclass(frozen=True)
class SimConfig:
    decide_every_s: float = 0.0
    """A control plane's reconcile period: the policy runs on multiples of it after something changed (0: at
    every instant with an event, which the exact-schedule tests use)."""
    tick_s: float = 60.0
    """While jobs wait, the policy is asked at least this often."""
    usage_half_life_s: float = 3600.0
    max_rounds_per_instant: int = 8
    stop_at_horizon: bool = True
    """Stop at the end of the measured window (else run until every job has finished)."""


@dataclass(frozen=True)
class ScheduledRun:
    """One run of one job, for exact-schedule tests and plots."""

    job_id: str
    start: float
    end: float
    preempted: bool
    node_ids: tuple[str, ...]


@dataclass
class _Live:
    trace: TraceJob
    job: Job
    remaining_s: float
    version: int = 0
    first_start: float | None = None


@dataclass
class Simulation:
    trace: Trace
    scheduler: Scheduler
    config: SimConfig = field(default_factory=SimConfig)
    runs: list[ScheduledRun] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cluster = uniform_cluster(self.trace.nodes, self.trace.gpus_per_node)
        self.cluster.usage = UsageLedger(half_life_s=self.config.usage_half_life_s)
        self.live: dict[str, _Live] = {}
        self.pending: dict[str, Job] = {}
        self.running: dict[str, Job] = {}
        self.running_gpus: dict[str, int] = {}
        self.pending_gpus: dict[str, int] = {}
        self.busy = 0
        self.gangs_waiting = 0
        self.finished = 0
        self.decisions = 0
        self.now = 0.0
        self._events: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._decide_at: float | None = None
        self._trace_jobs = {trace_job.id: trace_job for trace_job in self.trace.jobs}
        weights = {quota.team: quota.weight for quota in self.trace.quotas}
        self.metrics = MetricsRecorder(
            gpus=self.trace.gpus, start_s=self.trace.warmup_s, end_s=self.trace.end_s, weights=weights
        )

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        for trace_job in self.trace.jobs:
            self._push(trace_job.submit_at, _Event.ARRIVE, trace_job.id)
        end = self.trace.end_s
        while self._events:
            t = self._events[0][0]
            if self.config.stop_at_horizon and t > end:
                break
            self._account(t)
            decide = False
            while self._events and self._events[0][0] == t:
                _, kind, _, job_id, version = heapq.heappop(self._events)
                if kind == _Event.DECIDE:
                    decide = True
                    self._decide_at = None
                else:
                    self._handle(_Event(kind), job_id, version)
                    self._want_decision(t)
            self._observe()
            if decide:
                self._schedule()
                if self.pending:
                    self._want_decision(t + self.config.tick_s)
        self._account(end if self.config.stop_at_horizon else self.now)
        for waiting in self.pending.values():
            if self.live[waiting.id].first_start is None and self.metrics.in_window(waiting.submitted_at):
                self.metrics.wait(waiting.priority_class, max(0.0, end - waiting.submitted_at))
        return self.metrics.result(self.scheduler.name, self.trace.name, self.finished, self.decisions)

    def _want_decision(self, t: float) -> None:
        """Make sure the policy runs at the first reconcile instant at or after t."""
        period = self.config.decide_every_s
        at = t if period <= 0 else math.ceil(t / period) * period
        if self._decide_at is None or at < self._decide_at:
            self._decide_at = at
            self._push(at, _Event.DECIDE, "")

    def _push(self, t: float, kind: _Event, job_id: str, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, int(kind), self._seq, job_id, version))

    def _account(self, t: float) -> None:
        """Integrate the metrics over [now, t) with the state that held since the last event."""
        if t > self.now:
            demand = dict(self.running_gpus)
            for team, gpus in self.pending_gpus.items():
                demand[team] = demand.get(team, 0) + gpus
            self.metrics.span(
                self.now,
                t,
                busy=self.busy,
                free=self.cluster.total_free,
                gang_waiting=self.gangs_waiting > 0,
                running=self.running_gpus,
                demand={team: gpus for team, gpus in demand.items() if gpus},
            )
            self.now = t

    def _observe(self) -> None:
        self.cluster.usage.observe(self.now, self.running_gpus)

    # -- events --------------------------------------------------------------------------------------------------
    def _handle(self, kind: _Event, job_id: str, version: int) -> None:
        if kind is _Event.ARRIVE:
            trace_job = self._trace_jobs[job_id]
            job = Job(id=job_id, spec=trace_job.spec, submitted_at=trace_job.submit_at)
            self.live[job_id] = _Live(trace=trace_job, job=job, remaining_s=trace_job.work_s)
            self._enqueue(job)
            return
        live = self.live[job_id]
        if live.version != version:
            return  # a finish made stale by a preemption
        if kind is _Event.FINISH:
            job = live.job
            self._stop_running(job, finished=True)
            job.state = JobState.SUCCEEDED
            live.remaining_s = 0.0
            self.finished += 1
        elif kind is _Event.RELEASE:
            self._stop_running(live.job, finished=False)
            self._enqueue(live.job)

    def _enqueue(self, job: Job) -> None:
        job.state = JobState.QUEUED
        job.placement = None
        job.started_at = None
        job.last_checkpoint_at = None
        self.pending[job.id] = job
        self.pending_gpus[job.team] = self.pending_gpus.get(job.team, 0) + job.spec.gpus
        if job.spec.gpus > 1:
            self.gangs_waiting += 1

    def _stop_running(self, job: Job, *, finished: bool) -> None:
        """Give a running (or stopping) job's GPUs back and close its run."""
        placement = self.cluster.release(job.id)
        del self.running[job.id]
        if job.state is JobState.RUNNING:  # a stopping job left the team's count when it was told to stop
            self.running_gpus[job.team] -= job.spec.gpus
        self.busy -= placement.gpu_count
        job.gpu_seconds += (self.now - _started(job)) * job.spec.gpus
        if finished:
            self.runs.append(self._run_record(job, placement, preempted=False))

    def _run_record(self, job: Job, placement: Placement, *, preempted: bool) -> ScheduledRun:
        return ScheduledRun(
            job_id=job.id,
            start=_started(job),
            end=self.now,
            preempted=preempted,
            node_ids=tuple(sorted(placement.node_ids)),
        )

    # -- decisions -----------------------------------------------------------------------------------------------
    def _schedule(self) -> None:
        for _ in range(self.config.max_rounds_per_instant):
            if not self.pending:
                return
            decision = self.scheduler.decide(
                self.now, list(self.pending.values()), list(self.running.values()), self.cluster
            )
            self.decisions += 1
            if decision.empty:
                return
            freed_now = self._apply(decision)
            self._observe()
            if not freed_now:
                return

    def _apply(self, decision: Decision) -> bool:
        """Carry out a decision; True when a preemption gave GPUs back at once (worth deciding again)."""
        freed_now = False
        for preemption in decision.preempt:
            freed_now |= self._preempt(self.running[preemption.job_id])
        for job_id, placement in decision.start:
            self._start(self.pending[job_id], placement)
        return freed_now

    def _start(self, job: Job, placement: Placement) -> None:
        live = self.live[job.id]
        self.cluster.allocate(job.id, placement)
        del self.pending[job.id]
        self.pending_gpus[job.team] -= job.spec.gpus
        if job.spec.gpus > 1:
            self.gangs_waiting -= 1
        job.state = JobState.RUNNING
        job.placement = placement
        job.started_at = self.now
        self.running[job.id] = job
        self.running_gpus[job.team] = self.running_gpus.get(job.team, 0) + job.spec.gpus
        self.busy += placement.gpu_count
        if live.first_start is None:
            live.first_start = self.now
            if self.metrics.in_window(job.submitted_at):
                self.metrics.wait(job.priority_class, self.now - job.submitted_at)
        live.version += 1
        self._push(self.now + live.remaining_s, _Event.FINISH, job.id, live.version)

    def _preempt(self, job: Job) -> bool:
        """Tell a job to stop: it keeps what it checkpointed, and its GPUs return after the grace period."""
        live = self.live[job.id]
        ran = self.now - _started(job)
        lost = min(job.work_at_risk_s(self.now), ran)
        if job.spec.checkpoint is None:
            live.remaining_s = live.trace.work_s  # nothing saved: it starts over
        else:
            live.remaining_s = max(live.remaining_s - (ran - lost), 0.0)
        lost_gpu_s = lost * job.spec.gpus
        job.preempted_at.append(self.now)
        self.cluster.usage.record_preemption(
            PreemptionRecord(
                at=self.now, job_id=job.id, team=job.team, gpus=job.spec.gpus, lost_gpu_s=lost_gpu_s
            )
        )
        self.metrics.preempted(self.now, lost_gpu_s)
        self.runs.append(self._run_record(job, self.cluster.allocations[job.id], preempted=True))
        live.version += 1
        grace = job.spec.checkpoint.grace_period_s if job.spec.checkpoint else 0.0
        if grace > 0:
            job.state = JobState.PREEMPTING
            self.running_gpus[job.team] -= job.spec.gpus
            self._push(self.now + grace, _Event.RELEASE, job.id, live.version)
            return False
        self._stop_running(job, finished=False)
        self._enqueue(job)
        return True


class SimulationError(RuntimeError):
    """The simulator's own bookkeeping disagrees with itself (a bug, not bad input)."""


def _started(job: Job) -> float:
    if job.started_at is None:
        raise SimulationError(f"job {job.id!r} is treated as running but has no start time")
    return job.started_at
