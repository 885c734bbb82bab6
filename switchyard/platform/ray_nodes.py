"""The Ray cluster's nodes as the platform counts them: id, address, logical GPUs, alive or not."""

from __future__ import annotations

from dataclasses import dataclass

import ray


@dataclass(frozen=True)
class RayNode:
    id: str
    address: str
    gpu_count: int
    alive: bool


def ray_nodes() -> list[RayNode]:
    """Every node Ray knows, dead ones included (their jobs must be requeued, so they are not forgotten)."""
    return [
        RayNode(
            id=node["NodeID"],
            address=node.get("NodeManagerAddress", ""),
            gpu_count=int(node.get("Resources", {}).get("GPU", 0)),
            alive=bool(node["Alive"]),
        )
        for node in ray.nodes()
    ]
