"""The contract every scheduling policy meets: a pure decision from the queue, the running jobs and the cluster.

No I/O, no clock of its own and no randomness, so the Ray control plane and the simulator get the same
answer for the same state. `decide` may use the cluster view's indexes while it plans, but leaves the view as
it found it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job, Placement


@dataclass(frozen=True)
class Preemption:
    job_id: str
    reason: str
    """Why, in words a team can read (`"reclaim for serving job s-12"`)."""


@dataclass(frozen=True)
class Decision:
    start: tuple[tuple[str, Placement], ...] = ()
    """Jobs to start now, each on GPUs that are free now."""
    preempt: tuple[Preemption, ...] = ()
    """Running jobs to stop (checkpoint signal, then kill after the grace period)."""

    @property
    def empty(self) -> bool:
        return not self.start and not self.preempt


class Scheduler(Protocol):
    name: str

    def decide(
        self, now: float, pending: Sequence[Job], running: Sequence[Job], cluster: ClusterView
    ) -> Decision:
        """What to start and what to preempt now. `running` includes PREEMPTING jobs, which still hold GPUs."""
        ...
