"""The platform's agent on each Ray node: answers heartbeats with its GPUs' health, and runs burn-in checks.

One actor per node, pinned there with a hard NodeAffinity and no resources, so it runs beside the jobs and
never competes with them. A heartbeat the control plane sends and gets back proves the node, its raylet and
the path to it are alive; the answer carries the probe's faults.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import ray

from switchyard.platform.gpu_probes import probe_gpus, run_burn_in
from switchyard.platform.nvml_health import NvmlHealth
from switchyard.platform.xid import XidWatcher


@dataclass(frozen=True)
class Heartbeat:
    node_id: str
    at: float
    """The node's clock when it probed."""
    faults: dict[int, str]
    """Faulty GPUs and why (empty: all healthy)."""


@dataclass(frozen=True)
class BurnInResult:
    node_id: str
    gpus: tuple[int, ...]
    """The GPUs tested."""
    failures: dict[int, str]
    """GPUs that failed and why; the others passed."""


class NodeAgent:
    def __init__(
        self, node_id: str, gpu_count: int, fault_file: str | None, burn_in_command: tuple[str, ...] = ()
    ) -> None:
        self.node_id = node_id
        self.gpu_count = gpu_count
        self.fault_file = None if fault_file is None else Path(fault_file)
        self.burn_in_command = burn_in_command
        self.nvml = NvmlHealth.open(gpu_count) if gpu_count > 0 else None
        """The GPUs through NVML (None without the library: `nvidia-smi` is asked instead)."""
        self.xid = XidWatcher() if shutil.which("nvidia-smi") else None
        """Critical Xid errors of this node's GPUs in the kernel log, latched while this agent lives (None
        without a driver)."""

    def probe(self) -> dict[int, str]:
        return probe_gpus(self.node_id, self.gpu_count, self.fault_file, self.xid, self.nvml)

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(self.node_id, time.time(), self.probe())

    def burn_in(self, gpus: list[int], timeout_s: float) -> BurnInResult:
        """The burn-in command on each GPU (when one is configured), then a fresh probe: both must pass."""
        failures: dict[int, str] = {}
        for gpu in gpus:
            if self.burn_in_command:
                failure = run_burn_in(self.burn_in_command, gpu, timeout_s)
                if failure is not None:
                    failures[gpu] = failure
        faults = self.probe()
        for gpu in gpus:
            if gpu in faults:
                failures.setdefault(gpu, faults[gpu])
        return BurnInResult(self.node_id, tuple(gpus), failures)


NodeAgentActor = ray.remote(NodeAgent)
