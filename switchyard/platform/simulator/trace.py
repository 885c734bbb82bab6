"""A workload trace: the cluster's shape, the teams' quotas, and jobs with their true runtimes."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.platform.jobs import JobSpec
from switchyard.platform.policy.quotas import TeamQuota


@dataclass(frozen=True)
class TraceJob:
    id: str
    spec: JobSpec
    submit_at: float
    work_s: float
    """How long the job really runs on its full allocation (its spec's `expected_runtime_s` is only an estimate)."""

    def __post_init__(self) -> None:
        if self.work_s <= 0 or self.submit_at < 0:
            raise ValueError(f"trace job {self.id!r}: work_s must be positive and submit_at >= 0")


@dataclass(frozen=True)
class Trace:
    name: str
    nodes: int
    gpus_per_node: int
    jobs: tuple[TraceJob, ...]
    quotas: tuple[TeamQuota, ...] = ()
    horizon_s: float | None = None
    """End of the measured window (default: the last arrival)."""
    warmup_s: float = 0.0
    """Start of the measured window: the cluster starts empty, so the first hours say little."""
    origin: str = ""
    """Where the jobs came from, in words (a generator and its seed, or a public trace and its licence)."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def end_s(self) -> float:
        if self.horizon_s is not None:
            return self.horizon_s
        return max((job.submit_at for job in self.jobs), default=0.0)
