"""The cluster as the scheduler sees it: nodes, GPU health, and which job holds which GPUs.

`ClusterView` keeps per-node free GPU sets and buckets nodes by their free count, so best-fit placement asks
"the fullest node with at least k free GPUs" in O(GPUs per node) instead of scanning every GPU of a
10,000-GPU cluster. Change nodes and allocations only through its methods, which keep those indexes right.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from switchyard.platform.jobs import Placement, WorkerSlot
from switchyard.platform.usage import UsageLedger


class GpuHealth(StrEnum):
    HEALTHY = "healthy"
    CORDONED = "cordoned"
    """Takes no new work (a fault was seen); running work may finish or be moved."""
    REPAIR = "repair"
    BURN_IN = "burn_in"
    """Repaired and under test; returns to HEALTHY only after passing."""


class PlacementConflict(ValueError):
    """A placement names a GPU that is not free (held, unhealthy, cordoned, or on a dead node)."""


@dataclass
class Node:
    id: str
    gpu_count: int
    gpu_health: dict[int, GpuHealth] = field(default_factory=dict)
    """Every GPU index 0..gpu_count-1; filled with HEALTHY when left empty."""
    cordoned: bool = False
    alive: bool = True

    def __post_init__(self) -> None:
        if self.gpu_count < 0:
            raise ValueError(f"node {self.id!r}: gpu_count must be >= 0")
        for index in range(self.gpu_count):
            self.gpu_health.setdefault(index, GpuHealth.HEALTHY)

    def schedulable_gpus(self) -> set[int]:
        """GPUs that may receive new work, held or not."""
        if not self.alive or self.cordoned:
            return set()
        return {index for index, health in self.gpu_health.items() if health is GpuHealth.HEALTHY}


@dataclass
class ClusterView:
    """Nodes, allocations (job id -> placement) and the teams' usage history, with free-GPU indexes."""

    nodes: dict[str, Node]
    allocations: dict[str, Placement] = field(default_factory=dict)
    usage: UsageLedger = field(default_factory=UsageLedger)
    _free: dict[str, set[int]] = field(init=False, repr=False)
    _buckets: list[dict[str, None]] = field(init=False, repr=False)
    """_buckets[k]: the nodes with exactly k free GPUs, as an insertion-ordered set (deterministic picks)."""
    _free_total: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.reindex()

    # -- indexes -------------------------------------------------------------------------------------------------
    def reindex(self) -> None:
        """Rebuild the free-GPU indexes from nodes and allocations (after editing them directly)."""
        held: dict[str, set[int]] = {node_id: set() for node_id in self.nodes}
        for job_id, placement in self.allocations.items():
            for slot in placement.workers:
                if slot.node_id not in held:
                    raise PlacementConflict(f"job {job_id!r} holds GPUs on unknown node {slot.node_id!r}")
                held[slot.node_id].update(slot.gpus)
        largest = max((node.gpu_count for node in self.nodes.values()), default=0)
        self._buckets = [{} for _ in range(largest + 1)]
        self._free = {}
        self._free_total = 0
        for node_id, node in self.nodes.items():
            free = node.schedulable_gpus() - held[node_id]
            self._free[node_id] = free
            self._buckets[len(free)][node_id] = None
            self._free_total += len(free)

    def _set_free(self, node_id: str, free: set[int]) -> None:
        old = self._free[node_id]
        del self._buckets[len(old)][node_id]
        self._free[node_id] = free
        self._buckets[len(free)][node_id] = None
        self._free_total += len(free) - len(old)

    def _refresh_node(self, node_id: str) -> None:
        held = {
            gpu
            for placement in self.allocations.values()
            for slot in placement.workers
            if slot.node_id == node_id
            for gpu in slot.gpus
        }
        self._set_free(node_id, self.nodes[node_id].schedulable_gpus() - held)

    # -- queries -------------------------------------------------------------------------------------------------
    def free_gpus(self, node_id: str) -> list[int]:
        """Healthy, not cordoned, not allocated GPUs of a live node, lowest index first."""
        return sorted(self._free[node_id])

    def free_count(self, node_id: str) -> int:
        return len(self._free[node_id])

    @property
    def total_free(self) -> int:
        return self._free_total

    @property
    def largest_free_block(self) -> int:
        """The most free GPUs on any single node."""
        for count in range(len(self._buckets) - 1, 0, -1):
            if self._buckets[count]:
                return count
        return 0

    def total_gpus(self) -> int:
        """Every GPU of every live node, whatever its health."""
        return sum(node.gpu_count for node in self.nodes.values() if node.alive)

    def nodes_with_free(self, at_least: int) -> Iterator[str]:
        """Nodes with at least `at_least` free GPUs, fullest first (best-fit order); ties in a stable order."""
        for count in range(max(at_least, 1), len(self._buckets)):
            yield from list(self._buckets[count])

    def take(self, node_id: str, count: int) -> WorkerSlot:
        """A slot of the `count` lowest-indexed free GPUs of a node (not yet allocated)."""
        free = self.free_gpus(node_id)
        if len(free) < count:
            raise PlacementConflict(f"node {node_id!r} has {len(free)} free GPUs, {count} asked")
        return WorkerSlot(node_id=node_id, gpus=tuple(free[:count]))

    # -- changes -------------------------------------------------------------------------------------------------
    def allocate(self, job_id: str, placement: Placement) -> None:
        """Give a placement's GPUs to a job; all or nothing."""
        if job_id in self.allocations:
            raise PlacementConflict(f"job {job_id!r} already holds GPUs")
        wanted: dict[str, set[int]] = {}
        for slot in placement.workers:
            gpus = wanted.setdefault(slot.node_id, set())
            if slot.node_id not in self._free or gpus & set(slot.gpus):
                raise PlacementConflict(f"job {job_id!r}: bad slot {slot}")
            gpus.update(slot.gpus)
        for node_id, gpus in wanted.items():
            if not gpus <= self._free[node_id]:
                raise PlacementConflict(
                    f"job {job_id!r}: GPUs {sorted(gpus - self._free[node_id])} on {node_id!r} not free"
                )
        for node_id, gpus in wanted.items():
            self._set_free(node_id, self._free[node_id] - gpus)
        self.allocations[job_id] = placement

    def release(self, job_id: str) -> Placement:
        """Take a job's GPUs back; those still schedulable become free again."""
        placement = self.allocations.pop(job_id)
        for slot in placement.workers:
            node = self.nodes[slot.node_id]
            returned = set(slot.gpus) & node.schedulable_gpus()
            if returned:
                self._set_free(slot.node_id, self._free[slot.node_id] | returned)
        return placement

    def set_gpu_health(self, node_id: str, gpu: int, health: GpuHealth) -> None:
        self.nodes[node_id].gpu_health[gpu] = health
        self._refresh_node(node_id)

    def set_cordoned(self, node_id: str, cordoned: bool) -> None:
        self.nodes[node_id].cordoned = cordoned
        self._refresh_node(node_id)

    def set_alive(self, node_id: str, alive: bool) -> None:
        self.nodes[node_id].alive = alive
        self._refresh_node(node_id)

    def add_node(self, node: Node) -> None:
        if node.id in self.nodes:
            raise ValueError(f"node {node.id!r} already known")
        self.nodes[node.id] = node
        while len(self._buckets) <= node.gpu_count:
            self._buckets.append({})
        self._free[node.id] = set()
        self._buckets[0][node.id] = None
        self._refresh_node(node.id)


def uniform_cluster(nodes: int, gpus_per_node: int = 8, prefix: str = "node") -> ClusterView:
    """A cluster of identical healthy nodes named `{prefix}-0000`... (simulations and tests)."""
    width = max(4, len(str(nodes - 1)))
    return ClusterView(
        nodes={
            f"{prefix}-{index:0{width}d}": Node(id=f"{prefix}-{index:0{width}d}", gpu_count=gpus_per_node)
            for index in range(nodes)
        }
    )
