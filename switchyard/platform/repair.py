"""A GPU's way out of service and back: cordoned on a fault, repaired once free, burned in, then returned.

    HEALTHY --fault--> CORDONED --its jobs moved off--> REPAIR --fault cleared--> BURN_IN --passed--> HEALTHY
                                                          ^                          |
                                                          +---------failed-----------+

A pure function of what the control plane observed, so every transition is tested without a cluster. The
control plane writes each new state to its store before acting on it (preempting the jobs of a cordoned GPU),
and runs a burn-in on every BURN_IN GPU that is not already under one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from switchyard.platform.inventory import GpuHealth


class RepairAction(StrEnum):
    NONE = "none"
    MOVE_JOBS = "move_jobs"
    """Preempt the jobs on this GPU (checkpoint signal, grace period) so they resume elsewhere."""


@dataclass(frozen=True)
class GpuStep:
    health: GpuHealth
    reason: str
    action: RepairAction = RepairAction.NONE


@dataclass(frozen=True)
class BurnInVerdict:
    failure: str | None
    """Why the burn-in failed; None when it passed."""


def next_gpu_health(
    health: GpuHealth, reason: str, fault: str | None, held: bool, burn_in: BurnInVerdict | None = None
) -> GpuStep:
    """The GPU's next state.

    `fault`: the last heartbeat's fault for it (None: clean). `held`: a job still holds it. `burn_in`: the
    verdict of a burn-in that just finished (None: none did)."""
    if health is GpuHealth.HEALTHY:
        if fault is not None:
            return GpuStep(GpuHealth.CORDONED, fault, RepairAction.MOVE_JOBS if held else RepairAction.NONE)
        return GpuStep(health, "")
    if health is GpuHealth.CORDONED:
        if held:
            return GpuStep(health, reason, RepairAction.MOVE_JOBS)
        return GpuStep(GpuHealth.REPAIR, reason)
    if health is GpuHealth.REPAIR:
        if fault is None:
            return GpuStep(GpuHealth.BURN_IN, f"repaired ({reason}); burning in")
        return GpuStep(health, fault)
    # BURN_IN
    if burn_in is None:
        return GpuStep(health, reason)
    if burn_in.failure is None:
        return GpuStep(GpuHealth.HEALTHY, "")
    return GpuStep(GpuHealth.REPAIR, f"burn-in failed: {burn_in.failure}")
