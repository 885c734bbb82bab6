"""GPU health from NVML, NVIDIA's management library (`nvidia-ml-py`), the API `nvidia-smi` itself reads.

Each probe asks, per GPU: is it still visible and not lost (fallen off the bus), has it uncorrected volatile
ECC errors, has row remapping failed or is one waiting for a reset (retired pages pending on GPUs before
row remapping), is the hardware slowing its clocks (HW slowdown, thermal or power brake). Critical Xid errors
arrive as NVML events, so unlike the kernel log (`xid.py`) they need no root; like there, each is latched
for the probe's life, since these faults need a reset and must not let a GPU pass burn-in unrepaired. A query
a GPU does not support is skipped; NVML failing as a whole (the driver gone) marks every GPU faulty. Where
the library is absent (CPU nodes), `NvmlHealth.open` returns None and the node agent falls back to
`nvidia-smi`.
"""

from __future__ import annotations

import ctypes
import logging
from types import ModuleType
from typing import Any

from switchyard.platform.xid import CRITICAL_XIDS

logger = logging.getLogger(__name__)

HW_SLOWDOWN_REASONS: tuple[tuple[str, str], ...] = (
    ("nvmlClocksEventReasonHwSlowdown", "hardware slowdown"),
    ("nvmlClocksEventReasonHwThermalSlowdown", "hardware thermal slowdown"),
    ("nvmlClocksEventReasonHwPowerBrakeSlowdown", "hardware power-brake slowdown"),
)
"""Clock event reasons that mean the GPU protects itself (an application clock limit is not a fault)."""


class NvmlHealth:
    """One node's GPUs through NVML: `faults()` per heartbeat, Xid events registered once and latched."""

    def __init__(self, nvml: ModuleType, gpu_count: int) -> None:
        """Use `open` instead: it starts NVML and returns None where there is no library."""
        self._nvml = nvml
        self.gpu_count = gpu_count
        self._started = False
        self._events: Any = None
        self._registered: dict[int, Any] = {}
        """GPU index -> the handle its Xid events were registered with (to place an event whose GPU is lost)."""
        self._xid_latched: dict[int, str] = {}

    @classmethod
    def open(cls, gpu_count: int, nvml: ModuleType | None = None) -> NvmlHealth | None:
        """NVML for `gpu_count` GPUs, or None where it cannot be loaded (no `nvidia-ml-py`, no driver library).

        A library that loads but will not start (driver not loaded) is a fault, not an absence: the probe
        is returned and reports every GPU faulty until NVML starts."""
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                return None
            nvml = pynvml
        health = cls(nvml, gpu_count)
        try:
            health._start()
        except nvml.NVMLError_LibraryNotFound:
            return None
        except nvml.NVMLError as error:
            logger.warning("NVML did not start: %s", error)
        return health

    def _start(self) -> None:
        nvml = self._nvml
        nvml.nvmlInit()
        self._started = True
        self._events = self._register_xid_events()

    def _register_xid_events(self) -> Any:
        """An event set with critical Xid events of every GPU that supports them (None: no GPU does)."""
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            logger.warning("NVML events unavailable, Xid errors come from the kernel log only: %s", error)
            return None
        try:
            visible = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            logger.warning("NVML did not count the GPUs, Xid events not registered: %s", error)
            visible = 0
        for index in range(min(self.gpu_count, visible)):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                if nvml.nvmlDeviceGetSupportedEventTypes(handle) & nvml.nvmlEventTypeXidCriticalError:
                    nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
                    self._registered[index] = handle
            except nvml.NVMLError as error:
                logger.warning("GPU %d: Xid events not registered: %s", index, error)
        if not self._registered:
            nvml.nvmlEventSetFree(events)
            return None
        return events

    def close(self) -> None:
        nvml = self._nvml
        if self._events is not None:
            nvml.nvmlEventSetFree(self._events)
            self._events = None
        if self._started:
            nvml.nvmlShutdown()
            self._started = False

    # -- the probe -----------------------------------------------------------------------------------------------
    def faults(self) -> dict[int, str]:
        """Faulty GPUs of this node and why; an empty dict is a clean bill of health."""
        nvml = self._nvml
        if not self._started:
            try:
                self._start()
            except nvml.NVMLError as error:
                return dict.fromkeys(range(self.gpu_count), f"NVML did not start: {error}")
        try:
            visible = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            return dict.fromkeys(range(self.gpu_count), f"NVML did not answer: {error}")
        self._drain_xid_events()
        faults: dict[int, str] = {}
        for index in range(self.gpu_count):
            if index >= visible:
                faults[index] = f"not visible to the driver ({visible} of {self.gpu_count} GPUs are)"
                continue
            reason = self._gpu_fault(index)
            if reason is not None:
                faults[index] = reason
        for index, reason in self._xid_latched.items():
            faults.setdefault(index, reason)
        return faults

    def _gpu_fault(self, index: int) -> str | None:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return self._ecc(handle) or self._remapping(handle) or self._slowdown(handle)
        except nvml.NVMLError_GpuIsLost:
            return "GPU is lost (fallen off the bus)"
        except nvml.NVMLError as error:
            return f"NVML query failed: {error}"

    def _ecc(self, handle: Any) -> str | None:
        nvml = self._nvml
        try:
            count = nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        except nvml.NVMLError_NotSupported:
            return None
        return f"{count} uncorrected ECC error(s)" if count > 0 else None

    def _remapping(self, handle: Any) -> str | None:
        nvml = self._nvml
        try:
            _, _, pending, failed = nvml.nvmlDeviceGetRemappedRows(handle)
        except nvml.NVMLError_NotSupported:
            try:
                retired_pending = nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
            except nvml.NVMLError_NotSupported:
                return None
            return (
                "retired pages pending, reset needed"
                if retired_pending == nvml.NVML_FEATURE_ENABLED
                else None
            )
        if failed:
            return "row remapping failed"
        return "row remapping pending, reset needed" if pending else None

    def _slowdown(self, handle: Any) -> str | None:
        nvml = self._nvml
        try:
            reasons = nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            return None
        active = [words for name, words in HW_SLOWDOWN_REASONS if reasons & getattr(nvml, name)]
        return f"{', '.join(active)} active" if active else None

    def _drain_xid_events(self) -> None:
        """Read every Xid event waiting (without blocking) and latch the critical ones."""
        nvml = self._nvml
        if self._events is None:
            return
        while True:
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError_Timeout:
                return
            except nvml.NVMLError as error:
                logger.warning("NVML event wait failed: %s", error)
                return
            code = int(event.eventData)
            if code not in CRITICAL_XIDS:
                logger.info("Xid %d (an application's error, not the GPU's)", code)
                continue
            index = self._index_of(event.device)
            if index is None:
                logger.warning("Xid %d on a GPU NVML no longer places", code)
                continue
            self._xid_latched.setdefault(index, f"Xid {code}: {CRITICAL_XIDS[code]}")

    def _index_of(self, device: Any) -> int | None:
        """The index of an event's GPU: asked of NVML, else matched against the handles registered (a GPU that
        fell off the bus no longer answers for itself)."""
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetIndex(device))
        except nvml.NVMLError:
            pass
        address = _address(device)
        for index, handle in self._registered.items():
            if handle is device or (address is not None and _address(handle) == address):
                return index
        return None


def _address(handle: Any) -> int | None:
    """A device handle's pointer value (NVML hands out a new ctypes object per call for the same GPU)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
