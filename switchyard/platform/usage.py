"""Each team's GPU-time history: decayed usage for fair share, and recent preemptions for the budget.

The policy reads a ledger and never writes it; whoever runs the cluster (the control plane, the simulator)
calls `observe` before the running set changes and `record_preemption` when it applies one. Decay is
exponential with a half-life, so yesterday's heavy use counts half as much today (with a one-day half-life).
A `UsageSnapshot` is what survives a control-plane restart (the control plane keeps it in its SQLite store).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from switchyard.platform.jobs import Job


@dataclass(frozen=True)
class PreemptionRecord:
    at: float
    job_id: str
    team: str
    gpus: int
    lost_gpu_s: float
    """GPU-seconds of work thrown away (since the victim's last checkpoint)."""


def gpus_by_team(jobs: Iterable[Job]) -> dict[str, int]:
    """GPUs held per team by the given (running) jobs."""
    totals: dict[str, int] = {}
    for job in jobs:
        totals[job.team] = totals.get(job.team, 0) + job.spec.gpus
    return totals


@dataclass(frozen=True)
class UsageSnapshot:
    """A ledger's history as of its last `observe`: each team's decayed GPU-seconds up to `at`, and the GPUs
    it held from `at` on (they accrue until the next observation, also across a restart)."""

    at: float
    decayed_gpu_s: Mapping[str, float]
    gpus: Mapping[str, int]


@dataclass
class UsageLedger:
    half_life_s: float = 3600.0
    window_s: float = 3600.0
    """How far back preemption records are kept (the preemption budget's window)."""
    _decayed: dict[str, float] = field(default_factory=dict, repr=False)
    _rates: dict[str, int] = field(default_factory=dict, repr=False)
    _at: float | None = field(default=None, repr=False)
    _preemptions: deque[PreemptionRecord] = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        if self.half_life_s <= 0 or self.window_s <= 0:
            raise ValueError("half_life_s and window_s must be positive")

    def observe(self, now: float, running_gpus: Mapping[str, int]) -> None:
        """Account the GPUs held since the last call, then note the GPUs held from now on (per team)."""
        if self._at is not None and now > self._at:
            elapsed = now - self._at
            factor = math.exp(-math.log(2) * elapsed / self.half_life_s)
            gain = self.half_life_s / math.log(2) * (1.0 - factor)
            for team in sorted(set(self._decayed) | set(self._rates)):
                self._decayed[team] = self._decayed.get(team, 0.0) * factor + self._rates.get(team, 0) * gain
        if self._at is None or now > self._at:
            self._at = now
        self._rates = {team: gpus for team, gpus in running_gpus.items() if gpus}
        while self._preemptions and self._preemptions[0].at < now - self.window_s:
            self._preemptions.popleft()

    def snapshot(self) -> UsageSnapshot | None:
        """The history to persist; None before the first observation (nothing to keep yet)."""
        if self._at is None:
            return None
        return UsageSnapshot(self._at, dict(self._decayed), dict(self._rates))

    def restore(self, snapshot: UsageSnapshot) -> None:
        """Continue from a persisted history, as if this ledger had made those observations itself."""
        self._at = snapshot.at
        self._decayed = dict(snapshot.decayed_gpu_s)
        self._rates = {team: gpus for team, gpus in snapshot.gpus.items() if gpus}

    def decayed_gpu_s(self, team: str) -> float:
        """Decayed GPU-seconds of the team up to the last `observe`."""
        return self._decayed.get(team, 0.0)

    def record_preemption(self, record: PreemptionRecord) -> None:
        self._preemptions.append(record)

    def preempted_gpus_since(self, team: str, since: float) -> int:
        """GPUs taken from the team by preemptions at or after `since` (within the kept window)."""
        return sum(record.gpus for record in self._preemptions if record.team == team and record.at >= since)

    def preemptions(self) -> tuple[PreemptionRecord, ...]:
        return tuple(self._preemptions)
