"""Xid errors: the NVIDIA driver's fault reports in the kernel log, read so a critical one takes its GPU out.

The driver writes `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.` to the kernel log.
The codes below are those NVIDIA's Xid catalogue resolves by resetting the GPU, draining the node or
replacing the part (not by restarting the application); a GPU that logged one is reported faulty, which
cordons it, moves its jobs off and sends it to repair. The fault is latched: it stays until the node agent
restarts with a log that no longer holds it (a reboot starts a new kernel log), because these errors need a
reset or a reboot, and a report that vanished on its own would let the GPU pass burn-in unrepaired.

The kernel log is read with `dmesg` (or `journalctl -k -b`), which needs root or `kernel.dmesg_restrict=0`
on most distributions; where neither answers, Xid errors are not read, and the docs say so.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

CRITICAL_XIDS: Mapping[int, str] = {
    48: "double-bit ECC error",
    63: "row remapping pending (ECC), reset needed",
    64: "row remapping failure (ECC)",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
}
"""Xid codes that take a GPU out of service, and what each means."""

KERNEL_LOG_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("dmesg", "--kernel", "--nopager"),
    ("journalctl", "-k", "-b", "--no-pager", "-o", "cat"),
)
KERNEL_LOG_TIMEOUT_S = 10.0

_XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F]+)[^)]*\): (?P<code>\d+)"
)


@dataclass(frozen=True)
class XidEvent:
    pci: tuple[int, int, int]
    """(domain, bus, device) of the GPU that reported it."""
    code: int
    line: str


def pci_key(text: str) -> tuple[int, int, int]:
    """(domain, bus, device) of a PCI address as the kernel (`0000:3b:00`) or nvidia-smi
    (`00000000:3B:00.0`) writes it."""
    parts = text.strip().split(".")[0].split(":")
    if len(parts) != 3:
        raise ValueError(f"not a PCI address: {text!r}")
    domain, bus, device = (int(part, 16) for part in parts)
    return domain, bus, device


def parse_xid_lines(text: str) -> list[XidEvent]:
    """Every Xid report in a kernel log, in order."""
    events = []
    for line in text.splitlines():
        match = _XID_LINE.search(line)
        if match is not None:
            events.append(XidEvent(pci_key(match["bus"]), int(match["code"]), line.strip()))
    return events


def parse_bus_ids(text: str) -> dict[tuple[int, int, int], int]:
    """GPU index by PCI address, from `nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader`."""
    indices = {}
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit():
            indices[pci_key(fields[1])] = int(fields[0])
    return indices


def critical_faults(events: list[XidEvent], gpu_by_pci: Mapping[tuple[int, int, int], int]) -> dict[int, str]:
    """Faulty GPUs and why, for the critical events of GPUs this node knows (the first event names the fault)."""
    faults: dict[int, str] = {}
    for event in events:
        gpu = gpu_by_pci.get(event.pci)
        if gpu is not None and event.code in CRITICAL_XIDS:
            faults.setdefault(gpu, f"Xid {event.code}: {CRITICAL_XIDS[event.code]}")
    return faults


def read_kernel_log() -> str | None:
    """The kernel log of this boot, or None when no reader is allowed to read it."""
    for command in KERNEL_LOG_COMMANDS:
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=KERNEL_LOG_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if result.returncode == 0:
            return result.stdout
    return None


def read_bus_ids() -> dict[tuple[int, int, int], int]:
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=KERNEL_LOG_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_bus_ids(result.stdout) if result.returncode == 0 else {}


@dataclass
class XidWatcher:
    """One node's critical Xid faults, latched for the life of the node agent (see the module docstring)."""

    read_log: Callable[[], str | None] = read_kernel_log
    read_gpus: Callable[[], Mapping[tuple[int, int, int], int]] = read_bus_ids
    readable: bool | None = None
    """Whether the kernel log could be read at the last poll (None: not polled yet)."""
    _latched: dict[int, str] = field(default_factory=dict, repr=False)
    _gpu_by_pci: Mapping[tuple[int, int, int], int] = field(default_factory=dict, repr=False)

    def poll(self) -> dict[int, str]:
        """The GPUs with a critical Xid so far and why."""
        text = self.read_log()
        self.readable = text is not None
        if text is None:
            return dict(self._latched)
        events = parse_xid_lines(text)
        if events or not self._gpu_by_pci:
            # A fallen-off GPU drops out of nvidia-smi, so the PCI map is kept from when it answered.
            self._gpu_by_pci = {**self._gpu_by_pci, **self.read_gpus()}
            for gpu, reason in critical_faults(events, self._gpu_by_pci).items():
                self._latched.setdefault(gpu, reason)
        return dict(self._latched)
