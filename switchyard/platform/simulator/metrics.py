"""What a simulation measures, integrated between events: utilisation, waits, fairness, fragmentation, churn.

Everything is measured over the trace's window [warmup, horizon]. Fairness is Jain's index of each team's
GPU-time divided by its entitlement, where the entitlement is the weighted max-min share of the cluster given
what the team asked for at each moment (running plus queued GPUs), so a team that asked for little is not
counted as starved.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from switchyard.platform.jobs import PriorityClass
from switchyard.platform.policy.quotas import weighted_entitlement


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def jain_index(values: Sequence[float]) -> float:
    """(sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one value holds everything."""
    if not values:
        return math.nan
    square_sum = sum(v * v for v in values)
    return 1.0 if square_sum == 0 else sum(values) ** 2 / (len(values) * square_sum)


@dataclass(frozen=True)
class SimResult:
    policy: str
    trace: str
    gpus: int
    window_s: float
    utilisation: float
    """GPU-time held by jobs over GPU-time available, in the window (work later lost included)."""
    goodput: float
    """Like utilisation, without the work that preemptions threw away."""
    wait_p50_s: dict[str, float]
    wait_p99_s: dict[str, float]
    """Queueing delay from submission to first start, per class (jobs still waiting count their wait so far)."""
    jain: float
    gang_idle_gpu_fraction: float
    """Free GPUs while at least one gang waited, as a share of all GPU-time in the window."""
    preemptions_per_hour: float
    gpu_hours_lost: float
    jobs_finished: int
    decisions: int
    team_share: dict[str, float] = field(default_factory=dict)
    """Each team's GPU-time over its entitlement."""


@dataclass
class MetricsRecorder:
    gpus: int
    start_s: float
    end_s: float
    weights: Mapping[str, float]
    busy_gpu_s: float = 0.0
    gang_idle_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    preemptions: int = 0
    got_gpu_s: dict[str, float] = field(default_factory=dict)
    entitled_gpu_s: dict[str, float] = field(default_factory=dict)
    waits: dict[PriorityClass, list[float]] = field(default_factory=dict)

    def span(
        self,
        t0: float,
        t1: float,
        *,
        busy: int,
        free: int,
        gang_waiting: bool,
        running: Mapping[str, int],
        demand: Mapping[str, int],
    ) -> None:
        """Account the interval [t0, t1) during which the cluster stayed as described."""
        lo, hi = max(t0, self.start_s), min(t1, self.end_s)
        if hi <= lo:
            return
        dt = hi - lo
        self.busy_gpu_s += busy * dt
        if gang_waiting:
            self.gang_idle_gpu_s += free * dt
        if demand:
            entitled = weighted_entitlement(self.gpus, demand, self.weights)
            for team, share in entitled.items():
                self.entitled_gpu_s[team] = self.entitled_gpu_s.get(team, 0.0) + share * dt
            for team, gpus in running.items():
                self.got_gpu_s[team] = self.got_gpu_s.get(team, 0.0) + gpus * dt

    def in_window(self, t: float) -> bool:
        return self.start_s <= t <= self.end_s

    def wait(self, priority_class: PriorityClass, seconds: float) -> None:
        self.waits.setdefault(priority_class, []).append(seconds)

    def preempted(self, at: float, lost_gpu_s: float) -> None:
        if self.in_window(at):
            self.preemptions += 1
            self.lost_gpu_s += lost_gpu_s

    def result(self, policy: str, trace: str, jobs_finished: int, decisions: int) -> SimResult:
        window = self.end_s - self.start_s
        capacity = self.gpus * window
        ratios = {
            team: self.got_gpu_s.get(team, 0.0) / entitled
            for team, entitled in self.entitled_gpu_s.items()
            if entitled > 0
        }
        names = {klass: klass.name.lower() for klass in PriorityClass}
        return SimResult(
            policy=policy,
            trace=trace,
            gpus=self.gpus,
            window_s=window,
            utilisation=self.busy_gpu_s / capacity if capacity else math.nan,
            goodput=(self.busy_gpu_s - self.lost_gpu_s) / capacity if capacity else math.nan,
            wait_p50_s={names[k]: percentile(v, 50) for k, v in sorted(self.waits.items())},
            wait_p99_s={names[k]: percentile(v, 99) for k, v in sorted(self.waits.items())},
            jain=jain_index(list(ratios.values())),
            gang_idle_gpu_fraction=self.gang_idle_gpu_s / capacity if capacity else math.nan,
            preemptions_per_hour=self.preemptions / (window / 3600.0) if window else math.nan,
            gpu_hours_lost=self.lost_gpu_s / 3600.0,
            jobs_finished=jobs_finished,
            decisions=decisions,
            team_share=ratios,
        )
