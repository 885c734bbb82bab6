"""Gang placement: all workers or none, one node when the gang asks for it, best-fit or first-fit.

Best-fit puts a gang on the fullest node that still fits it, so whole nodes stay free for 8-GPU gangs;
first-fit (the FIFO baseline) takes the first node in inventory order that fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import JobSpec, Placement, WorkerSlot


class Fit(StrEnum):
    BEST = "best"
    FIRST = "first"


def _candidates(cluster: ClusterView, need: int, fit: Fit) -> Iterable[str]:
    if fit is Fit.BEST:
        return cluster.nodes_with_free(need)
    return (node_id for node_id in cluster.nodes if cluster.free_count(node_id) >= need)


def place_gang(
    spec: JobSpec,
    cluster: ClusterView,
    *,
    fit: Fit = Fit.BEST,
    allowed: Callable[[str], bool] | None = None,
) -> Placement | None:
    """A placement for the whole gang on free GPUs, or None when it cannot fit now (never a partial one)."""
    if cluster.total_free < spec.gpus:
        return None
    if spec.same_node:
        if cluster.largest_free_block < spec.gpus:
            return None
        for node_id in _candidates(cluster, spec.gpus, fit):
            if allowed is None or allowed(node_id):
                return _split_node(cluster, node_id, spec)
        return None
    return _spread(spec, cluster, fit, allowed)


def _split_node(cluster: ClusterView, node_id: str, spec: JobSpec) -> Placement:
    gpus = cluster.take(node_id, spec.gpus).gpus
    per = spec.gpus_per_worker
    return Placement(
        workers=tuple(
            WorkerSlot(node_id=node_id, gpus=gpus[i * per : (i + 1) * per]) for i in range(spec.workers)
        )
    )


def _spread(
    spec: JobSpec, cluster: ClusterView, fit: Fit, allowed: Callable[[str], bool] | None
) -> Placement | None:
    """Workers packed onto as few nodes as possible, fullest fitting nodes first."""
    if cluster.largest_free_block < spec.gpus_per_worker:
        return None
    slots: list[WorkerSlot] = []
    per = spec.gpus_per_worker
    for node_id in _candidates(cluster, per, fit):
        if allowed is not None and not allowed(node_id):
            continue
        free = cluster.free_gpus(node_id)
        while len(free) >= per and len(slots) < spec.workers:
            slots.append(WorkerSlot(node_id=node_id, gpus=tuple(free[:per])))
            free = free[per:]
        if len(slots) == spec.workers:
            return Placement(workers=tuple(slots))
    return None
