"""Xid errors read from recorded kernel-log lines (no GPU here: the log and nvidia-smi's answers are recorded
text), mapped to their GPU, latched, and turned into cordon -> repair by the health state machine."""

from __future__ import annotations

from pathlib import Path

from switchyard.platform.gpu_probes import probe_gpus, set_injected_fault
from switchyard.platform.inventory import GpuHealth
from switchyard.platform.repair import RepairAction, next_gpu_health
from switchyard.platform.xid import (
    CRITICAL_XIDS,
    XidWatcher,
    critical_faults,
    parse_bus_ids,
    parse_xid_lines,
    pci_key,
)

DMESG = """\
[    4.120331] nvidia 0000:3b:00.0: enabling device (0000 -> 0002)
[  269.516977] NVRM: GPU at PCI:0000:86:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae
[  269.517039] NVRM: Xid (PCI:0000:86:00): 79, pid=1896, GPU has fallen off the bus.
[  270.439207] NVRM: Xid (PCI:0000:3b:00): 13, pid=2211, Graphics Exception: ESR 0x404600=0x80000001
[  290.101010] NVRM: Xid (0000:af:00): 48, pid=3030, An uncorrectable double bit error (DBE) has been detected.
"""
JOURNAL = "Oct 01 13:00:00 node-7 kernel: NVRM: Xid (PCI:0000:AF:00): 94, pid=77, Contained ECC error.\n"
NVIDIA_SMI_BUS_IDS = "0, 00000000:3B:00.0\n1, 00000000:86:00.0\n2, 00000000:AF:00.0\n"


def test_xid_lines_are_parsed_in_both_driver_formats() -> None:
    events = parse_xid_lines(DMESG + JOURNAL)
    assert [(e.pci, e.code) for e in events] == [
        ((0, 0x86, 0), 79),
        ((0, 0x3B, 0), 13),
        ((0, 0xAF, 0), 48),
        ((0, 0xAF, 0), 94),
    ]
    assert events[0].line.endswith("GPU has fallen off the bus.")
    assert pci_key("00000000:AF:00.0") == pci_key("0000:af:00") == (0, 0xAF, 0)
    assert parse_bus_ids(NVIDIA_SMI_BUS_IDS + "garbage\n") == {
        (0, 0x3B, 0): 0,
        (0, 0x86, 0): 1,
        (0, 0xAF, 0): 2,
    }


def test_only_critical_xids_of_known_gpus_are_faults() -> None:
    gpus = parse_bus_ids(NVIDIA_SMI_BUS_IDS)
    faults = critical_faults(parse_xid_lines(DMESG + JOURNAL), gpus)
    # Xid 13 is the application's error (GPU 0 stays healthy); GPU 2's first critical Xid names the fault.
    assert faults == {1: "Xid 79: GPU has fallen off the bus", 2: "Xid 48: double-bit ECC error"}
    assert critical_faults(parse_xid_lines(DMESG), {}) == {}  # a bus this node does not know: not ours
    assert {48, 63, 64, 74, 79, 92, 94, 95} <= set(CRITICAL_XIDS)


class RecordedNode:
    """The node's kernel log and nvidia-smi answers over time, as recorded text (the GPU's test double)."""

    def __init__(self) -> None:
        self.log: str | None = DMESG.splitlines()[0] + "\n"
        self.bus_ids = NVIDIA_SMI_BUS_IDS

    def read_log(self) -> str | None:
        return self.log

    def read_gpus(self) -> dict[tuple[int, int, int], int]:
        return parse_bus_ids(self.bus_ids)


def test_a_critical_xid_is_latched_until_the_agent_restarts() -> None:
    node = RecordedNode()
    watcher = XidWatcher(read_log=node.read_log, read_gpus=node.read_gpus)
    assert watcher.poll() == {} and watcher.readable
    node.log = DMESG
    node.bus_ids = "0, 00000000:3B:00.0\n2, 00000000:AF:00.0\n"  # GPU 1 fell off: nvidia-smi lost it
    expected = {1: "Xid 79: GPU has fallen off the bus", 2: "Xid 48: double-bit ECC error"}
    assert watcher.poll() == expected  # GPU 1 mapped from when it still answered
    node.log = "[  999.0] the ring buffer wrapped\n"
    assert watcher.poll() == expected  # the lines are gone, the faults are not
    node.log = None
    assert watcher.poll() == expected and watcher.readable is False
    rebooted = XidWatcher(read_log=lambda: "[ 3.0] a fresh boot\n", read_gpus=node.read_gpus)
    assert rebooted.poll() == {}


def test_an_xid_fault_cordons_its_gpu_moves_its_job_and_holds_it_in_repair(tmp_path: Path) -> None:
    node = RecordedNode()
    node.log = JOURNAL
    watcher = XidWatcher(read_log=node.read_log, read_gpus=node.read_gpus)
    fault_file = tmp_path / "faults.json"
    set_injected_fault(fault_file, "node-7", 0, "injected: ECC")
    faults = probe_gpus("node-7", 4, fault_file, watcher)
    assert faults == {0: "injected: ECC", 2: "Xid 94: contained ECC error"}
    step = next_gpu_health(GpuHealth.HEALTHY, "", faults.get(2), held=True)
    assert (step.health, step.action) == (GpuHealth.CORDONED, RepairAction.MOVE_JOBS)
    step = next_gpu_health(step.health, step.reason, faults.get(2), held=False)
    assert step.health is GpuHealth.REPAIR
    # Latched: the next probe reports it again, so the GPU stays in repair rather than burning in.
    again = probe_gpus("node-7", 4, fault_file, watcher).get(2)
    assert next_gpu_health(step.health, step.reason, again, held=False).health is GpuHealth.REPAIR
