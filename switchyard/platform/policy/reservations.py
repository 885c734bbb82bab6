"""Reservations and backfill: a waiting gang books the node it can start on soonest.

Without them a stream of 1-GPU jobs keeps every node partly busy and an 8-GPU gang waits forever. The
reserved node takes no new work except backfill: jobs whose own estimate says they end before the gang's
expected start, so the reservation never slips because of them. Estimates come from the submitters
(`expected_runtime_s`); a running job without one ends "never", so a node it holds is a poor reservation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job


@dataclass(frozen=True)
class Reservation:
    job_id: str
    node_id: str
    start_at: float
    """When the node is expected to have enough free GPUs for the gang."""


def releases_by_node(
    running: Sequence[Job], cluster: ClusterView, now: float
) -> dict[str, list[tuple[float, int]]]:
    """node -> (expected end, GPUs it frees there) for jobs still allocated, soonest first."""
    out: dict[str, list[tuple[float, int]]] = {}
    for job in running:
        placement = cluster.allocations.get(job.id)
        if placement is None:
            continue
        end = job.expected_end()
        when = math.inf if end is None else max(end, now)
        for slot in placement.workers:
            out.setdefault(slot.node_id, []).append((when, len(slot.gpus)))
    for items in out.values():
        items.sort()
    return out


def earliest_node(
    need: int,
    cluster: ClusterView,
    releases: Mapping[str, list[tuple[float, int]]],
    now: float,
    taken: set[str],
) -> tuple[str, float] | None:
    """The node (not in `taken`) where `need` GPUs are expected free soonest, with that time; None if never."""
    best: tuple[float, int, str] | None = None
    for node_id, node in cluster.nodes.items():
        if node_id in taken or len(node.schedulable_gpus()) < need:
            continue
        have = cluster.free_count(node_id)
        when = now
        if have < need:
            when = math.inf
            for end, gpus in releases.get(node_id, ()):
                have += gpus
                if have >= need:
                    when = end
                    break
        if math.isinf(when):
            continue
        key = (when, -cluster.free_count(node_id), node_id)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    return best[2], best[0]


def fits_before(job: Job, reservation: Reservation, now: float) -> bool:
    """Backfill rule: the job's own estimate ends it before the reserved gang is expected to start."""
    runtime = job.spec.expected_runtime_s
    return runtime is not None and now + runtime <= reservation.start_at
