"""Reservations and backfill: a waiting gang books the node it can start on soonest.

Without them a stream of 1-GPU jobs keeps every node partly busy and an 8-GPU gang waits forever. The
reserved node takes no new work except backfill: jobs whose own estimate says they end before the gang's
expected start, so the reservation never slips because of them. Estimates come from the submitters
(`expected_runtime_s`); a running job without one ends "never", so a node it holds is a poor reservation.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Job


@dataclass(frozen=True)
class Reservation:
    job_id: str
    node_ids: tuple[str, ...]
    """One node for a same-node gang; one per worker for a spread gang."""
    start_at: float
    """When the node is expected to have enough free GPUs for the gang."""


def releases_by_node(
    running: Sequence[Job], cluster: ClusterView, now: float
) -> dict[str, list[tuple[float, int]]]:
    """node -> (expected end, GPUs it frees there) for jobs still allocated, soonest first."""
    out: dict[str, list[tuple[float, int]]] = {}
    allocations = cluster.allocations
    inf = math.inf
    for job in running:
        placement = allocations.get(job.id)
        if placement is None:
            continue
        runtime = job.spec.expected_runtime_s
        when = inf if runtime is None or job.started_at is None else max(job.started_at + runtime, now)
        for slot in placement.workers:
            out.setdefault(slot.node_id, []).append((when, len(slot.gpus)))
    for items in out.values():
        items.sort()
    return out


def earliest_nodes(
    per_worker: int,
    workers: int,
    cluster: ClusterView,
    releases: Mapping[str, list[tuple[float, int]]],
    now: float,
    taken: set[str],
    slack_s: float = 600.0,
) -> tuple[tuple[str, ...], float] | None:
    """The `workers` nodes (not in `taken`) to book so `per_worker` GPUs are free on each soonest, and when;
    None if never. Among nodes ready within `slack_s` of the soonest start, those with the fewest free GPUs
    now are booked, since a booked node's free GPUs sit idle until the gang starts (bar backfill). A spread
    gang books one worker per node, which over-books a little when several of its workers would fit one
    node, and never under-books."""
    ready: list[tuple[float, int, str]] = []
    for node_id, node in cluster.nodes.items():
        if node_id in taken or not node.alive or node.gpu_count < per_worker:
            continue
        have = cluster.free_count(node_id)
        when = now
        if have < per_worker:
            when = math.inf
            for end, gpus in releases.get(node_id, ()):
                have += gpus
                if have >= per_worker:
                    when = end
                    break
        if not math.isinf(when):
            ready.append((when, cluster.free_count(node_id), node_id))
    if len(ready) < workers:
        return None
    soonest = heapq.nsmallest(workers, ready)[-1][0]
    pool = [entry for entry in ready if entry[0] <= soonest + slack_s]
    chosen = heapq.nsmallest(workers, pool, key=lambda entry: (entry[1], entry[0], entry[2]))
    return tuple(node_id for _, _, node_id in chosen), max(when for when, _, _ in chosen)


def fits_before(job: Job, reservation: Reservation, now: float) -> bool:
    """Backfill rule: the job's own estimate ends it before the reserved gang is expected to start."""
    runtime = job.spec.expected_runtime_s
    return runtime is not None and now + runtime <= reservation.start_at
