"""Devices `switchyard plan` knows by name, and parsing of `--device` (a preset, `cpu:RAM` or a size)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator (or a CPU's RAM): the memory a process can allocate and its read bandwidth."""

    name: str
    memory_bytes: int
    """Total memory as the driver reports it (nvidia-smi's MiB), before any utilization fraction."""
    bandwidth_bytes_per_s: float | None
    """Peak memory read bandwidth from the spec sheet; None when unknown (no decode bound then)."""
    is_cpu: bool = False


# Memory as nvidia-smi reports it on these boards; bandwidth from NVIDIA's spec sheets (SXM where it varies).
DEVICE_PRESETS: dict[str, DeviceSpec] = {
    "h200-141g": DeviceSpec("h200-141g", 143771 * MiB, 4.8e12),
    "h100-80g": DeviceSpec("h100-80g", 81559 * MiB, 3.35e12),
    "a100-80g": DeviceSpec("a100-80g", 81920 * MiB, 2.039e12),
    "a100-40g": DeviceSpec("a100-40g", 40960 * MiB, 1.555e12),
    "l40s-48g": DeviceSpec("l40s-48g", 46068 * MiB, 0.864e12),
    "a10g-24g": DeviceSpec("a10g-24g", 23028 * MiB, 0.6e12),
    "l4-24g": DeviceSpec("l4-24g", 23034 * MiB, 0.3e12),
    "rtx4090-24g": DeviceSpec("rtx4090-24g", 24564 * MiB, 1.008e12),
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(g|gb|gib|m|mb|mib|t|tb|tib)?\s*$", re.IGNORECASE)
_UNITS = {"g": GiB, "gb": 10**9, "gib": GiB, "m": MiB, "mb": 10**6, "mib": MiB, "t": 1 << 40, "tb": 10**12}
_UNITS["tib"] = 1 << 40


def parse_size(text: str) -> int:
    """'24g' / '24GiB' -> 24 * 2**30, '80GB' -> 80e9, '512m' -> 512 MiB; a bare number means GiB."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"cannot read a memory size from {text!r} (examples: 24g, 80GiB, 512MiB)")
    unit = (match.group(2) or "g").lower()
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"memory size must be positive, got {text!r}")
    return size


def parse_device(text: str, bandwidth_gbps: float | None = None) -> DeviceSpec:
    """A preset name, `cpu:RAM` (e.g. cpu:24g) or a bare memory size; `bandwidth_gbps` overrides the preset's."""
    if bandwidth_gbps is not None and not 0 < bandwidth_gbps < math.inf:
        raise ValueError(f"bandwidth must be a positive number of GB/s, got {bandwidth_gbps}")
    bandwidth = bandwidth_gbps * 1e9 if bandwidth_gbps is not None else None
    key = text.strip().lower()
    if key in DEVICE_PRESETS:
        preset = DEVICE_PRESETS[key]
        if bandwidth is None:
            return preset
        return DeviceSpec(preset.name, preset.memory_bytes, bandwidth)
    if key.startswith("cpu:"):
        return DeviceSpec(key, parse_size(key[4:]), bandwidth, is_cpu=True)
    if _SIZE.match(key):
        return DeviceSpec(key, parse_size(key), bandwidth)
    raise ValueError(
        f"unknown device {text!r}: use a preset ({', '.join(DEVICE_PRESETS)}), cpu:RAM (e.g. cpu:24g) "
        "or a memory size (e.g. 40GiB)"
    )
