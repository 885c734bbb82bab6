"""A scratch plan over the cluster view: tentative allocations and releases, undone when `decide` returns.

The policy plans by changing the real view's indexes (cheap, incremental) rather than copying a
10,000-GPU cluster per decision, and every change goes through here so it can be undone exactly.
GPUs released from jobs that are still stopping are "draining": a gang may be held on them, not started.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from switchyard.platform.inventory import ClusterView
from switchyard.platform.jobs import Placement


@dataclass
class Plan:
    cluster: ClusterView
    draining: dict[str, set[int]] = field(default_factory=dict)
    """node -> GPUs freed in this plan that a stopping job still holds in reality."""
    _undo: list[tuple[str, str, Placement]] = field(default_factory=list)

    def allocate(self, key: str, placement: Placement) -> None:
        self.cluster.allocate(key, placement)
        self._undo.append(("allocate", key, placement))

    def release(self, key: str, *, draining: bool) -> Placement:
        placement = self.cluster.release(key)
        self._undo.append(("release", key, placement))
        if draining:
            for slot in placement.workers:
                self.draining.setdefault(slot.node_id, set()).update(slot.gpus)
        return placement

    def touches_draining(self, placement: Placement) -> bool:
        return any(
            self.draining.get(slot.node_id, set()).intersection(slot.gpus) for slot in placement.workers
        )

    def mark(self) -> int:
        return len(self._undo)

    def rollback(self, mark: int = 0) -> None:
        """Undo every change made after `mark` (all of them by default), newest first."""
        while len(self._undo) > mark:
            action, key, placement = self._undo.pop()
            if action == "allocate":
                self.cluster.release(key)
            else:
                self.cluster.allocate(key, placement)
