"""`CudaDevice`: the contract's device interface (memory, copies, sync, timing).

Nothing touches the driver until first use, so constructing a `CudaDevice` on a
machine without a GPU is harmless; the first real call raises `CudaUnavailableError`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from hidet_framework.backend.contract import DeviceInterface

from . import driver
from .memory import DeviceArray, allocator


class Stream:
    """A CUDA stream; ``Stream(0)`` style handles are also accepted wherever a stream
    is, and None means the legacy default stream."""

    def __init__(self, device_id: int = 0, *, non_blocking: bool = False):
        drv = driver.cuda_driver()
        driver.set_current_device(device_id)
        flags = drv.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else drv.CUstream_flags.CU_STREAM_DEFAULT
        self.device_id = device_id
        self.handle = driver.call("cuStreamCreate", flags)

    def synchronize(self) -> None:
        driver.call("cuStreamSynchronize", self.handle)

    def __int__(self) -> int:
        return int(self.handle)

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None:
            try:
                driver.cuda_driver().cuStreamDestroy(handle)
            except Exception:  # interpreter shutdown
                pass


class Event:
    """A CUDA event with timing enabled."""

    def __init__(self, device_id: int = 0):
        driver.set_current_device(device_id)
        self.handle = driver.call("cuEventCreate", driver.cuda_driver().CUevent_flags.CU_EVENT_DEFAULT)

    def record(self, stream: Any = None) -> None:
        driver.call("cuEventRecord", self.handle, driver.stream_handle(stream))

    def synchronize(self) -> None:
        driver.call("cuEventSynchronize", self.handle)

    def seconds_since(self, start: "Event") -> float:
        return float(driver.call("cuEventElapsedTime", start.handle, self.handle)) / 1e3

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None:
            try:
                driver.cuda_driver().cuEventDestroy(handle)
            except Exception:  # interpreter shutdown
                pass


class CudaDevice(DeviceInterface):
    """One CUDA device (its primary context), default stream = legacy default stream."""

    def __init__(self, device_id: int = 0):
        self.device_id = device_id

    def __repr__(self) -> str:
        return f"CudaDevice({self.device_id})"

    # -- memory ---------------------------------------------------------------------
    def empty(self, shape: Sequence[int], dtype: str) -> DeviceArray:
        return DeviceArray.empty(shape, dtype, device_id=self.device_id)

    def from_numpy(self, array: Any, *, dtype: Any = None, stream: Any = None) -> DeviceArray:
        return DeviceArray.from_numpy(array, device_id=self.device_id, dtype=dtype, stream=stream)

    def to_numpy(self, array: Any) -> Any:
        if not isinstance(array, DeviceArray):
            array = DeviceArray.from_dlpack(array)
        return array.to_numpy()

    def from_dlpack(self, obj: Any) -> DeviceArray:
        return DeviceArray.from_dlpack(obj)

    @property
    def allocator(self):
        return allocator(self.device_id)

    def empty_cache(self) -> None:
        allocator(self.device_id).empty_cache()

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes on the device, as the driver sees them."""
        driver.set_current_device(self.device_id)
        free, total = driver.call("cuMemGetInfo")
        return int(free), int(total)

    def call_plan(self, launches: Sequence[tuple], sites: Any, constant: Callable[[Any], Any], *,
                  cuda_graph: bool | str | None = None) -> Any:
        """A compiled graph's per-call binding (`call_plan.CudaCallPlan`): zero-copy
        inputs and outputs, launched as one CUDA graph (`cuda_graph` True or None),
        a graph with copies through the arena ("copy"), or plain launches (False)."""
        from .call_plan import CudaCallPlan

        mode = {None: "update", True: "update", "update": "update", "copy": "copy", False: None}.get(cuda_graph, "?")
        if mode == "?":
            raise ValueError(f"cuda_graph must be True, False or 'copy', got {cuda_graph!r}")
        return CudaCallPlan(launches, sites, constant, mode, self.device_id)

    # -- execution ------------------------------------------------------------------
    def synchronize(self) -> None:
        driver.set_current_device(self.device_id)
        driver.call("cuCtxSynchronize")

    def stream(self, *, non_blocking: bool = False) -> Stream:
        """A new stream on this device."""
        return Stream(self.device_id, non_blocking=non_blocking)

    def time(self, fn: Callable[[], None], *, warmup: int = 3, repeat: int = 10,
             stream: Any = None) -> list[float]:
        """Seconds per run of `fn`, measured by CUDA events around each of `repeat`
        runs after `warmup` untimed ones. `fn` must queue its work on `stream`
        (default: the legacy default stream, where kernels launch unless told)."""
        driver.set_current_device(self.device_id)
        for _ in range(warmup):
            fn()
        events = [(Event(self.device_id), Event(self.device_id)) for _ in range(repeat)]
        for start, end in events:
            start.record(stream)
            fn()
            end.record(stream)
        if events:
            events[-1][1].synchronize()
        return [end.seconds_since(start) for start, end in events]

    def time_launches(self, launches: Sequence[tuple], *, warmup: int = 1, repeat: int = 5) -> list[float]:
        """Seconds per run of bound launches, device time only (replayed as a CUDA
        graph; `launch_timing`): what the tuner compares candidates by."""
        from .launch_timing import time_launches

        return time_launches(self, launches, warmup=warmup, repeat=repeat)
