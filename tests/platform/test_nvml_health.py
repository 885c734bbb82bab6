"""GPU health through NVML: a stand-in for the driver behind the real `pynvml` bindings' errors and constants.

There is no GPU here, so `FakeDriver` answers NVML's calls the way the library documents them (error codes
raised as `pynvml`'s own exception classes); on a GPU machine the `gpu`-marked test asks the real driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from switchyard.platform.gpu_probes import probe_gpus
from switchyard.platform.nvml_health import NvmlHealth

_NAMES = [name for name in dir(pynvml) if name.startswith(("NVML", "nvmlClocks", "nvmlEventType"))]


def _fail(code: int) -> None:
    raise pynvml.NVMLError(code)  # the bindings turn a code into its own subclass, as the real calls do


@dataclass
class FakeGpu:
    ecc_uncorrected: int | None = 0
    """None: ECC not supported (a consumer GPU)."""
    remapped: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    """(corrected, uncorrected, pending, failed), or None before row remapping (pre-Ampere)."""
    retired_pending: int = 0
    clock_reasons: int = 0
    lost: bool = False
    supports_xid_events: bool = True


@dataclass
class FakeDriver:
    """The NVML library as a module: the functions NvmlHealth calls, over a list of `FakeGpu`."""

    gpus: list[FakeGpu]
    library_present: bool = True
    driver_loaded: bool = True
    started: int = 0
    queued_events: list[tuple[int, int]] = field(default_factory=list)
    """(GPU index, Xid) not yet read."""
    registered: set[int] = field(default_factory=set)

    def module(self) -> SimpleNamespace:
        names = {name: getattr(pynvml, name) for name in _NAMES}
        calls = {name: getattr(self, name) for name in dir(self) if name.startswith("nvml")}
        return SimpleNamespace(**names, **calls)

    def _gpu(self, handle: Any) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            _fail(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlInit(self) -> None:
        if not self.library_present:
            _fail(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if not self.driver_loaded:
            _fail(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self.started += 1

    def nvmlShutdown(self) -> None:
        self.started -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        self._gpu(handle)
        return handle

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        assert (error_type, counter) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        gpu = self._gpu(handle)
        if gpu.ecc_uncorrected is None:
            _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.ecc_uncorrected

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        gpu = self._gpu(handle)
        if gpu.remapped is None:
            _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.remapped

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return self._gpu(handle).retired_pending

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._gpu(handle).clock_reasons

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:
        supported = pynvml.nvmlEventTypeXidCriticalError if self._gpu(handle).supports_xid_events else 0
        return supported | pynvml.nvmlEventTypeSingleBitEccError

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, event_set: str) -> None:
        assert types == pynvml.nvmlEventTypeXidCriticalError and event_set == "event-set"
        self.registered.add(handle)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0, "the probe must never block on the event set"
        for position, (gpu, code) in enumerate(self.queued_events):
            if gpu in self.registered:
                del self.queued_events[position]
                return SimpleNamespace(
                    device=gpu, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=code
                )
        _fail(pynvml.NVML_ERROR_TIMEOUT)
        raise AssertionError  # unreachable: _fail raises

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.registered.clear()


def _health(driver: FakeDriver, gpu_count: int | None = None) -> NvmlHealth:
    health = NvmlHealth.open(len(driver.gpus) if gpu_count is None else gpu_count, driver.module())
    assert health is not None
    return health


def test_a_healthy_node_reports_no_fault_and_registers_xid_events_where_supported() -> None:
    driver = FakeDriver([FakeGpu(), FakeGpu(supports_xid_events=False), FakeGpu()])
    health = _health(driver)
    assert health.faults() == {}
    assert driver.registered == {0, 2}
    health.close()
    assert driver.started == 0 and driver.registered == set()


def test_each_hardware_fault_names_its_gpu_and_cause() -> None:
    driver = FakeDriver(
        [
            FakeGpu(ecc_uncorrected=3),
            FakeGpu(remapped=(2, 1, 0, 1)),
            FakeGpu(remapped=(0, 1, 1, 0)),
            FakeGpu(remapped=None, retired_pending=pynvml.NVML_FEATURE_ENABLED),
            FakeGpu(clock_reasons=pynvml.nvmlClocksEventReasonHwThermalSlowdown),
            FakeGpu(lost=True),
            FakeGpu(clock_reasons=pynvml.nvmlClocksEventReasonApplicationsClocksSetting),
            FakeGpu(ecc_uncorrected=None, remapped=None),
        ]
    )
    assert _health(driver).faults() == {
        0: "3 uncorrected ECC error(s)",
        1: "row remapping failed",
        2: "row remapping pending, reset needed",
        3: "retired pages pending, reset needed",
        4: "hardware thermal slowdown active",
        5: "GPU is lost (fallen off the bus)",
    }


def test_a_gpu_the_driver_no_longer_lists_is_faulty() -> None:
    driver = FakeDriver([FakeGpu(), FakeGpu()])
    assert _health(driver, gpu_count=4).faults() == {
        2: "not visible to the driver (2 of 4 GPUs are)",
        3: "not visible to the driver (2 of 4 GPUs are)",
    }


def test_a_critical_xid_event_is_latched_and_an_application_xid_is_not() -> None:
    driver = FakeDriver([FakeGpu(), FakeGpu(), FakeGpu()])
    health = _health(driver)
    driver.queued_events += [(0, 13), (2, 79), (1, 31)]
    assert health.faults() == {2: "Xid 79: GPU has fallen off the bus"}
    assert driver.queued_events == []
    # Latched: the GPU stays faulty at every later probe, with no new event, until the agent restarts.
    assert health.faults() == {2: "Xid 79: GPU has fallen off the bus"}
    driver.queued_events.append((2, 48))
    assert health.faults() == {2: "Xid 79: GPU has fallen off the bus"}, "the first critical Xid names it"


def test_an_xid_event_of_a_gpu_that_fell_off_the_bus_is_placed_by_its_registered_handle() -> None:
    driver = FakeDriver([FakeGpu(), FakeGpu()])
    health = _health(driver)
    driver.gpus[1].lost = True  # nvmlDeviceGetIndex now fails for it
    driver.queued_events.append((1, 79))
    faults = health.faults()
    assert faults == {1: "GPU is lost (fallen off the bus)"}
    driver.gpus[1].lost = False  # the driver answers again after a reset: the Xid is still latched
    assert health.faults() == {1: "Xid 79: GPU has fallen off the bus"}


def test_no_library_means_no_nvml_probe_and_a_driver_that_will_not_load_fails_every_gpu() -> None:
    assert NvmlHealth.open(2, FakeDriver([FakeGpu()], library_present=False).module()) is None
    driver = FakeDriver([FakeGpu(), FakeGpu()], driver_loaded=False)
    health = _health(driver)
    faults = health.faults()
    assert set(faults) == {0, 1} and all("NVML did not start" in why for why in faults.values())
    driver.driver_loaded = True  # the driver came back: the next probe starts NVML and finds them healthy
    assert health.faults() == {}
    assert driver.registered == {0, 1}


def test_probe_gpus_uses_nvml_before_nvidia_smi_and_keeps_injected_faults(tmp_path) -> None:
    from switchyard.platform.gpu_probes import set_injected_fault

    fault_file = tmp_path / "faults.json"
    set_injected_fault(fault_file, "node-1", 0, "drill")
    health = _health(FakeDriver([FakeGpu(), FakeGpu(ecc_uncorrected=1)]))
    assert probe_gpus("node-1", 2, fault_file, nvml=health) == {0: "drill", 1: "1 uncorrected ECC error(s)"}


def test_on_this_machine_without_a_driver_library_open_returns_none() -> None:
    """The node agent's real path on CPU nodes: the real bindings, no libnvidia-ml."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        assert NvmlHealth.open(4) is None
    else:  # a machine with a driver
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver; the gpu-marked test covers it")


@pytest.mark.gpu
def test_the_real_driver_reports_a_healthy_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    health = NvmlHealth.open(torch.cuda.device_count())
    assert health is not None
    try:
        assert health.faults() == {}, "a GPU in service should have a clean bill of health"
    finally:
        health.close()
