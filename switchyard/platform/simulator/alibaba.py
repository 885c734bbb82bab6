"""Reads the Alibaba GPU cluster trace slice (cluster-trace-gpu-v2023, the "openb" pods) into a `Trace`.

The trace is a sample of a ~6,000-GPU cluster, too sparse to load 1,000 GPUs in real time, so arrivals are
compressed by a stated factor; runtimes are capped because tasks still running at the end of the trace
have no true end. Classes come from the QoS column; the trace has no teams, so a hash of the task name picks
one of four, which keeps the run deterministic.
"""

from __future__ import annotations

import csv
import zlib
from dataclasses import dataclass
from pathlib import Path

from switchyard.platform.jobs import CheckpointPolicy, JobSpec, PriorityClass
from switchyard.platform.policy.quotas import TeamQuota
from switchyard.platform.simulator.trace import Trace, TraceJob

CLASS_BY_QOS = {
    "LS": PriorityClass.SERVING,
    "Burstable": PriorityClass.INTERACTIVE,
    "Guaranteed": PriorityClass.INTERACTIVE,
    "BE": PriorityClass.BATCH,
}
TEAMS = (("search", 3.0), ("chat", 3.0), ("research", 2.0), ("ads", 2.0))


class TraceFormatError(ValueError):
    """The CSV lacks a column the loader needs, or holds a value it cannot read."""


@dataclass(frozen=True)
class AlibabaSlice:
    path: Path
    nodes: int = 128
    gpus_per_node: int = 8
    compress: float = 175.0
    """Arrival times are divided by this (runtimes are not), to load the cluster."""
    repeat: int = 3
    """The compressed slice is replayed back to back this many times: it holds only ~5,000 GPU-hours, and a
    window shorter than the longest runtimes never reaches a steady state."""
    max_runtime_s: float = 6 * 3600.0
    first_day: float = 110.0
    """Days before this are dropped: the sample is nearly empty there."""
    guaranteed_share: float = 0.8
    """Share of the cluster given out as guarantees, split by team weight."""


def load_alibaba(cfg: AlibabaSlice) -> Trace:
    with cfg.path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    needed = {"name", "num_gpu", "qos", "creation_time", "scheduled_time", "deletion_time"}
    if not rows or not needed <= set(rows[0]):
        raise TraceFormatError(f"{cfg.path.name}: expected columns {sorted(needed)}")
    start = cfg.first_day * 86400.0
    kept = [row for row in rows if float(row["creation_time"]) >= start and row["scheduled_time"]]
    if not kept:
        raise TraceFormatError(f"{cfg.path.name}: no scheduled GPU tasks after day {cfg.first_day}")
    origin = min(float(row["creation_time"]) for row in kept)
    total_weight = sum(weight for _, weight in TEAMS)
    period = (max(float(row["creation_time"]) for row in kept) - origin) / cfg.compress
    one_pass: list[TraceJob] = []
    for row in kept:
        try:
            gpus = int(row["num_gpu"])
            klass = CLASS_BY_QOS[row["qos"]]
            runtime = float(row["deletion_time"]) - float(row["scheduled_time"])
            submit = (float(row["creation_time"]) - origin) / cfg.compress
        except (KeyError, ValueError) as exc:
            raise TraceFormatError(f"{cfg.path.name}: bad row {row.get('name')!r}: {exc}") from exc
        if gpus < 1 or gpus > cfg.gpus_per_node:
            continue
        work = min(max(runtime, 1.0), cfg.max_runtime_s)
        team = TEAMS[zlib.crc32(row["name"].encode()) % len(TEAMS)][0]
        serving = klass is PriorityClass.SERVING
        spec = JobSpec(
            name=row["name"],
            team=team,
            priority_class=klass,
            gpus_per_worker=gpus,
            preemptible=not serving,
            checkpoint=None if serving else _checkpoint(klass),
            # The trace has no user estimates; take the true runtime rounded up to the hour, as users do.
            expected_runtime_s=(work // 3600.0 + 1.0) * 3600.0,
        )
        one_pass.append(TraceJob(id=row["name"], spec=spec, submit_at=submit, work_s=work))
    jobs = [
        TraceJob(id=f"{job.id}#{r}", spec=job.spec, submit_at=job.submit_at + r * period, work_s=job.work_s)
        for r in range(cfg.repeat)
        for job in one_pass
    ]
    jobs.sort(key=lambda job: (job.submit_at, job.id))
    capacity = cfg.nodes * cfg.gpus_per_node
    quotas = tuple(
        TeamQuota(team, int(capacity * cfg.guaranteed_share * weight / total_weight), weight)
        for team, weight in TEAMS
    )
    horizon = jobs[-1].submit_at
    return Trace(
        name="alibaba-openb",
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        jobs=tuple(jobs),
        quotas=quotas,
        horizon_s=horizon,
        warmup_s=min(cfg.max_runtime_s, 0.3 * horizon),
        origin=(
            f"Alibaba cluster-trace-gpu-v2023 openb pods from day {cfg.first_day:g}, arrivals compressed "
            f"{cfg.compress:g}x and replayed {cfg.repeat}x, runtimes capped at {cfg.max_runtime_s / 3600:g} h"
        ),
    )


def _checkpoint(klass: PriorityClass) -> CheckpointPolicy:
    if klass is PriorityClass.INTERACTIVE:
        return CheckpointPolicy(grace_period_s=30.0, interval_s=None)
    return CheckpointPolicy(grace_period_s=30.0, interval_s=1800.0)
