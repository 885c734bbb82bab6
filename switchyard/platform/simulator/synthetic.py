"""Synthetic traces: serving, interactive and batch jobs from teams with skewed demand, at a chosen load.

Each class gets a share of the offered GPU-time; jobs are drawn (size, runtime, team) until their GPU-time
reaches `load x share x capacity x hours`, then arrive uniformly at random over the window (a Poisson process
conditioned on its count). Batch runtimes are lognormal (many short jobs, a long tail), gangs take 1-8 GPUs
of one node or spread over 2-4 nodes; submitters over-estimate runtimes by up to 2x, as people do.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from switchyard.platform.jobs import CheckpointPolicy, JobSpec, PriorityClass
from switchyard.platform.policy.quotas import TeamQuota
from switchyard.platform.simulator.trace import Trace, TraceJob


@dataclass(frozen=True)
class ClassMix:
    share: float
    """Share of the offered GPU-time."""
    sizes: tuple[tuple[int, int, float], ...]
    """(GPUs per worker, workers, probability)."""
    median_runtime_s: float
    sigma: float
    max_runtime_s: float


SERVING = ClassMix(0.2, ((1, 1, 0.3), (2, 1, 0.3), (4, 1, 0.25), (8, 1, 0.15)), 4 * 3600.0, 0.8, 24 * 3600.0)
INTERACTIVE = ClassMix(0.15, ((1, 1, 0.5), (2, 1, 0.3), (4, 1, 0.2)), 1800.0, 0.8, 4 * 3600.0)
BATCH = ClassMix(
    0.65,
    ((1, 1, 0.3), (2, 1, 0.2), (4, 1, 0.2), (8, 1, 0.2), (8, 2, 0.07), (8, 4, 0.03)),
    2 * 3600.0,
    1.0,
    24 * 3600.0,
)


@dataclass(frozen=True)
class SyntheticConfig:
    nodes: int = 256
    gpus_per_node: int = 8
    hours: float = 24.0
    load: float = 1.1
    """Offered GPU-time over capacity; above 1 a queue builds and the policy has choices to make."""
    seed: int = 0
    teams: tuple[tuple[str, float, float], ...] = (
        ("search", 3.0, 0.2),
        ("chat", 3.0, 0.35),
        ("research", 2.0, 0.35),
        ("ads", 2.0, 0.1),
    )
    """(team, weight, share of submitted work): demand is deliberately unlike the weights."""
    guaranteed_share: float = 0.8
    warmup_hours: float = 2.0


def synthetic_trace(cfg: SyntheticConfig) -> Trace:
    rng = random.Random(cfg.seed)
    capacity = cfg.nodes * cfg.gpus_per_node
    horizon = cfg.hours * 3600.0
    jobs: list[TraceJob] = []
    teams = [team for team, _, _ in cfg.teams]
    demand = [share for _, _, share in cfg.teams]
    for klass, mix in (
        (PriorityClass.SERVING, SERVING),
        (PriorityClass.INTERACTIVE, INTERACTIVE),
        (PriorityClass.BATCH, BATCH),
    ):
        target = cfg.load * mix.share * capacity * horizon
        offered = 0.0
        count = 0
        while offered < target:
            per, workers = _size(rng, mix)
            work = min(mix.max_runtime_s, rng.lognormvariate(math.log(mix.median_runtime_s), mix.sigma))
            work = max(work, 60.0)
            offered += per * workers * min(work, horizon)
            team = rng.choices(teams, weights=demand)[0]
            job_id = f"{klass.name.lower()}-{count:05d}"
            count += 1
            spec = JobSpec(
                name=job_id,
                team=team,
                priority_class=klass,
                gpus_per_worker=per,
                workers=workers,
                same_node=workers == 1,
                preemptible=klass is not PriorityClass.SERVING,
                checkpoint=_checkpoint(klass),
                expected_runtime_s=work * rng.uniform(1.0, 2.0),
            )
            jobs.append(TraceJob(id=job_id, spec=spec, submit_at=rng.uniform(0.0, horizon), work_s=work))
    jobs.sort(key=lambda job: (job.submit_at, job.id))
    total_weight = sum(weight for _, weight, _ in cfg.teams)
    quotas = tuple(
        TeamQuota(team, int(capacity * cfg.guaranteed_share * weight / total_weight), weight)
        for team, weight, _ in cfg.teams
    )
    return Trace(
        name=f"synthetic-{capacity}",
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        jobs=tuple(jobs),
        quotas=quotas,
        horizon_s=horizon,
        warmup_s=cfg.warmup_hours * 3600.0,
        origin=f"synthetic, {capacity} GPUs, {cfg.hours:g} h, load {cfg.load:g}, seed {cfg.seed}",
    )


def _size(rng: random.Random, mix: ClassMix) -> tuple[int, int]:
    per, workers, _ = rng.choices(mix.sizes, weights=[p for _, _, p in mix.sizes])[0]
    return per, workers


def _checkpoint(klass: PriorityClass) -> CheckpointPolicy | None:
    if klass is PriorityClass.SERVING:
        return None
    if klass is PriorityClass.INTERACTIVE:
        return CheckpointPolicy(grace_period_s=30.0, interval_s=None)
    return CheckpointPolicy(grace_period_s=30.0, interval_s=1800.0)
