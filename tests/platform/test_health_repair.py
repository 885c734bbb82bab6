"""GPU health without a cluster: the nvidia-smi parser, injected faults, and the repair lifecycle's steps."""

from __future__ import annotations

from pathlib import Path

from switchyard.platform.gpu_probes import (
    injected_faults,
    parse_nvidia_smi,
    probe_gpus,
    run_burn_in,
    set_injected_fault,
)
from switchyard.platform.inventory import GpuHealth
from switchyard.platform.repair import BurnInVerdict, RepairAction, next_gpu_health


def test_nvidia_smi_ecc_errors_and_slowdown_are_faults() -> None:
    text = "0, 0, Not Active\n1, 3, Not Active\n2, [N/A], Active\n3, 0, Not Active\n"
    assert parse_nvidia_smi(text) == {1: "3 uncorrected ECC error(s)", 2: "hardware slowdown active"}
    assert parse_nvidia_smi("") == {}
    assert parse_nvidia_smi("0, 2\n1, 0\n") == {0: "2 uncorrected ECC error(s)"}  # without the slowdown field


def test_injected_faults_are_per_node_and_clear(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    assert injected_faults(faults) == {}
    set_injected_fault(faults, "node-a", 1, "Xid 79")
    set_injected_fault(faults, "node-b", 0, "ECC")
    assert probe_gpus("node-a", 4, faults) == {1: "Xid 79"}
    set_injected_fault(faults, "node-a", 1, None)
    assert probe_gpus("node-a", 4, faults) == {}
    assert injected_faults(faults) == {"node-b": {0: "ECC"}}


def test_burn_in_command_passes_or_says_why(tmp_path: Path) -> None:
    assert run_burn_in(("sh", "-c", 'test "$CUDA_VISIBLE_DEVICES" = 3'), 3, 10) is None
    failure = run_burn_in(("sh", "-c", "echo broken >&2; exit 4"), 3, 10)
    assert failure is not None and "exited 4" in failure and "broken" in failure


def test_a_gpu_goes_cordoned_repair_burn_in_and_back() -> None:
    step = next_gpu_health(GpuHealth.HEALTHY, "", "ECC", held=True)
    assert (step.health, step.reason, step.action) == (GpuHealth.CORDONED, "ECC", RepairAction.MOVE_JOBS)
    step = next_gpu_health(step.health, step.reason, "ECC", held=True)
    assert (step.health, step.action) == (GpuHealth.CORDONED, RepairAction.MOVE_JOBS)  # until its jobs left
    step = next_gpu_health(step.health, step.reason, "ECC", held=False)
    assert step.health is GpuHealth.REPAIR
    step = next_gpu_health(step.health, step.reason, "ECC", held=False)
    assert step.health is GpuHealth.REPAIR  # the fault is still there
    step = next_gpu_health(step.health, step.reason, None, held=False)
    assert step.health is GpuHealth.BURN_IN
    assert (
        next_gpu_health(step.health, step.reason, None, held=False).health is GpuHealth.BURN_IN
    )  # no verdict yet
    failed = next_gpu_health(step.health, step.reason, None, held=False, burn_in=BurnInVerdict("ECC again"))
    assert (failed.health, failed.reason) == (GpuHealth.REPAIR, "burn-in failed: ECC again")
    passed = next_gpu_health(step.health, step.reason, None, held=False, burn_in=BurnInVerdict(None))
    assert (passed.health, passed.reason) == (GpuHealth.HEALTHY, "")


def test_a_free_faulty_gpu_is_cordoned_without_moving_anything() -> None:
    step = next_gpu_health(GpuHealth.HEALTHY, "", "ECC", held=False)
    assert (step.health, step.action) == (GpuHealth.CORDONED, RepairAction.NONE)
    assert next_gpu_health(GpuHealth.HEALTHY, "", None, held=True).health is GpuHealth.HEALTHY
