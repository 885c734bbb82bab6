"""Jobs as the scheduler sees them: what was asked for (`JobSpec`) and where it stands (`Job`).

Plain data shared by the policy, the simulator and the Ray control plane, so one schedule means the same thing
to all three.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from functools import cached_property


class PriorityClass(IntEnum):
    """Strict order between classes: a higher class is always considered first and may preempt a lower one."""

    BATCH = 0
    INTERACTIVE = 1
    SERVING = 2


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PREEMPTING = "preempting"
    """Told to stop (checkpoint signal sent); still holds its GPUs until the grace period ends or it exits."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class InvalidJobSpec(ValueError):
    """A job spec that no cluster could run as asked (zero GPUs, a gang larger than its topology allows...)."""


@dataclass(frozen=True)
class CheckpointPolicy:
    """How a preemptible job saves its work before it is stopped."""

    signal: str = "SIGTERM"
    """Sent to every worker when the job is preempted."""
    grace_period_s: float = 30.0
    """Time between the signal and a forced kill; the GPUs stay held meanwhile."""
    interval_s: float | None = None
    """How often the job checkpoints while it runs (None: only on the signal). Preemption loses the work done
    since the last checkpoint, so the victim rule prefers jobs that checkpointed recently."""


@dataclass(frozen=True)
class JobSpec:
    """What a team asks for. A gang of `workers` workers, each with `gpus_per_worker` GPUs, placed all or nothing."""

    name: str
    team: str
    priority_class: PriorityClass
    gpus_per_worker: int
    workers: int = 1
    same_node: bool = True
    """All workers on one node (a Ray STRICT_PACK placement group); False lets workers land on different nodes."""
    preemptible: bool = True
    checkpoint: CheckpointPolicy | None = None
    expected_runtime_s: float | None = None
    """The submitter's estimate; backfill in front of a reservation only trusts jobs that give one."""
    command: tuple[str, ...] = ()
    """What the executor runs on each worker (the simulator ignores it)."""

    def __post_init__(self) -> None:
        if self.gpus_per_worker < 1 or self.workers < 1:
            raise InvalidJobSpec(f"job {self.name!r}: gpus_per_worker and workers must be >= 1")
        if self.expected_runtime_s is not None and self.expected_runtime_s <= 0:
            raise InvalidJobSpec(f"job {self.name!r}: expected_runtime_s must be positive")
        if not self.team:
            raise InvalidJobSpec(f"job {self.name!r}: a team is required")

    @cached_property
    def gpus(self) -> int:
        """GPUs the whole gang holds (cached: the scheduler's hot loops read it for every job)."""
        return self.gpus_per_worker * self.workers


@dataclass(frozen=True)
class WorkerSlot:
    """One worker's share of a placement: GPU indices on one node."""

    node_id: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    workers: tuple[WorkerSlot, ...]

    @property
    def gpu_count(self) -> int:
        return sum(len(slot.gpus) for slot in self.workers)

    @property
    def node_ids(self) -> frozenset[str]:
        return frozenset(slot.node_id for slot in self.workers)


@dataclass
class Job:
    """A job's state as the control plane (or the simulator) keeps it; the policy only reads it."""

    id: str
    spec: JobSpec
    state: JobState = JobState.QUEUED
    submitted_at: float = 0.0
    started_at: float | None = None
    """Start of the current run (None while queued); reset on every (re)start."""
    placement: Placement | None = None
    preempted_at: list[float] = field(default_factory=list)
    gpu_seconds: float = 0.0
    """GPU-time consumed so far, across all runs."""
    last_checkpoint_at: float | None = None
    """When the current run last saved its work (None: nothing saved in this run)."""

    @property
    def team(self) -> str:
        return self.spec.team

    @property
    def priority_class(self) -> PriorityClass:
        return self.spec.priority_class

    def work_at_risk_s(self, now: float) -> float:
        """Seconds of the current run that a preemption now would throw away (since the last checkpoint)."""
        if self.started_at is None:
            return 0.0
        checkpoint = self.spec.checkpoint
        if checkpoint is not None and checkpoint.interval_s is None:
            return 0.0  # it checkpoints on the signal, within its grace period
        saved = (
            self.started_at
            if self.last_checkpoint_at is None
            else max(self.started_at, self.last_checkpoint_at)
        )
        if checkpoint is not None and checkpoint.interval_s:
            # A job that checkpoints on a declared interval is assumed to keep to it.
            interval = checkpoint.interval_s
            saved = max(saved, self.started_at + (now - self.started_at) // interval * interval)
        return max(0.0, now - saved)

    def expected_end(self) -> float | None:
        """When the current run should finish by the submitter's estimate (None: unknown or not running)."""
        if self.started_at is None or self.spec.expected_runtime_s is None:
            return None
        return self.started_at + self.spec.expected_runtime_s
