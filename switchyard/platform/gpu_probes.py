"""What a node agent checks on its GPUs: NVML or `nvidia-smi` where there is a driver, injected faults everywhere.

On a GPU node NVML (`nvml_health.py`) reports lost GPUs, uncorrected ECC errors, failed or pending row
remapping, hardware slowdown and critical Xid events per GPU. Without the `nvidia-ml-py` package, `nvidia-smi`
reports ECC errors and slowdown, and a failing `nvidia-smi` (driver gone, GPU fallen off the bus, Xid 79)
marks every GPU faulty. Critical Xid errors in the kernel log also mark their GPU faulty (`xid.py`, where the
agent may read the log: it holds those from before the agent started, which NVML's events do not). On CPU
nodes (tests, a laptop) the fault file is the only source: a JSON object `{NODE_ID: {GPU_INDEX: REASON}}` that
`switchyard cluster` writes when an operator injects a fault and clears when the GPU is repaired.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from switchyard.platform.nvml_health import NvmlHealth
from switchyard.platform.xid import XidWatcher

NVIDIA_SMI_FIELDS = ("index", "ecc.errors.uncorrected.volatile.total", "clocks_throttle_reasons.hw_slowdown")
NVIDIA_SMI_BASIC_FIELDS = NVIDIA_SMI_FIELDS[:2]
"""For a driver that no longer knows the slowdown field by that name: ECC errors alone."""
NVIDIA_SMI_TIMEOUT_S = 10.0


def probe_gpus(
    node_id: str,
    gpu_count: int,
    fault_file: Path | None,
    xid: XidWatcher | None = None,
    nvml: NvmlHealth | None = None,
) -> dict[int, str]:
    """Faulty GPUs of this node and why; an empty dict is a clean bill of health."""
    if nvml is not None:
        faults = nvml.faults()
    else:
        faults = nvidia_smi_faults(gpu_count) if shutil.which("nvidia-smi") else {}
    if xid is not None:
        for gpu, reason in xid.poll().items():
            faults.setdefault(gpu, reason)
    if fault_file is not None:
        for gpu, reason in injected_faults(fault_file).get(node_id, {}).items():
            faults.setdefault(gpu, reason)
    return faults


def nvidia_smi_query(fields: tuple[str, ...]) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def nvidia_smi_faults(gpu_count: int) -> dict[int, str]:
    try:
        result = _run_nvidia_smi(NVIDIA_SMI_FIELDS)
        if result.returncode != 0 and "not a valid field" in result.stdout + result.stderr:
            result = _run_nvidia_smi(NVIDIA_SMI_BASIC_FIELDS)  # a query mistake, not a GPU fault
    except (OSError, subprocess.TimeoutExpired) as error:
        return dict.fromkeys(range(gpu_count), f"nvidia-smi did not answer: {error}")
    if result.returncode != 0:
        reason = f"nvidia-smi exited {result.returncode}: {result.stderr.strip()[:200]}"
        return dict.fromkeys(range(gpu_count), reason)
    return parse_nvidia_smi(result.stdout)


def _run_nvidia_smi(fields: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        nvidia_smi_query(fields), capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False
    )


def parse_nvidia_smi(text: str) -> dict[int, str]:
    """Faults in the query's CSV: uncorrected ECC errors, or the hardware slowing the GPU down."""
    faults: dict[int, str] = {}
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 2 or not fields[0].isdigit():
            continue
        gpu, ecc, slowdown = int(fields[0]), fields[1], fields[2] if len(fields) > 2 else ""
        if ecc.isdigit() and int(ecc) > 0:
            faults[gpu] = f"{ecc} uncorrected ECC error(s)"
        elif slowdown.lower() == "active":
            faults[gpu] = "hardware slowdown active"
    return faults


def injected_faults(fault_file: Path) -> dict[str, dict[int, str]]:
    """The fault file's faults per node (an absent or empty file: none)."""
    try:
        data = json.loads(fault_file.read_text() or "{}")
    except FileNotFoundError:
        return {}
    return {node: {int(gpu): str(reason) for gpu, reason in gpus.items()} for node, gpus in data.items()}


def set_injected_fault(fault_file: Path, node_id: str, gpu: int, reason: str | None) -> None:
    """Add (reason given) or clear (None) one GPU's injected fault; the file is replaced atomically."""
    faults = injected_faults(fault_file)
    node = faults.setdefault(node_id, {})
    if reason is None:
        node.pop(gpu, None)
    else:
        node[gpu] = reason
    data = {node: {str(gpu): why for gpu, why in gpus.items()} for node, gpus in faults.items() if gpus}
    fault_file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=fault_file.parent, delete=False, suffix=".tmp") as handle:
        json.dump(data, handle)
    os.replace(handle.name, fault_file)


def run_burn_in(command: tuple[str, ...], gpu: int, timeout_s: float) -> str | None:
    """Run a burn-in command on one GPU; None when it passed, else why it failed."""
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
    try:
        result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"burn-in did not finish in {timeout_s:.0f} s"
    except OSError as error:
        return f"burn-in could not run: {error}"
    if result.returncode != 0:
        return f"burn-in exited {result.returncode}: {result.stderr.strip()[-200:]}"
    return None
