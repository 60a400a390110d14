"""The CPU device: arrays are numpy arrays in host memory; timing by wall clock."""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from hidet_framework.backend.contract import DeviceInterface
from hidet_framework.backend.signature import numpy_dtype

__all__ = ["CpuDevice", "ALIGNMENT"]

# One cache line and one AVX-512 register: generated code may use aligned vector loads
# on buffers it allocates, and split-line accesses cost throughput.
ALIGNMENT = 64


def aligned_empty(shape: Sequence[int], dtype: str | np.dtype, alignment: int = ALIGNMENT) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `alignment` boundary."""
    dt = numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset:offset + nbytes].view(dt).reshape(shape)


class CpuDevice(DeviceInterface):
    """Host memory and timers. Arrays are 64-byte aligned, C-contiguous numpy arrays;
    ``dtype`` names follow :mod:`hidet_framework.backend.signature` (bfloat16 as uint16).
    Kernels access vectors through element-aligned pointers (codegen.py), so a buffer may
    start on any element; views start on a cache line, so no run of a joined buffer
    begins with a split line."""

    view_alignment = ALIGNMENT

    def empty(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        return aligned_empty(shape, dtype)

    def from_numpy(self, array: Any) -> np.ndarray:
        array = np.asarray(array)
        out = aligned_empty(array.shape, array.dtype)
        out[...] = array  # always a copy, like a device upload: callers may mutate the source
        return out

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def synchronize(self) -> None:
        """Nothing to wait for: compiled CPU functions return when their work is done."""

    def time(self, fn: Callable[[], None], *, warmup: int = 3, repeat: int = 10) -> list[float]:
        for _ in range(warmup):
            fn()
        times = []
        clock = time.perf_counter_ns
        for _ in range(repeat):
            start = clock()
            fn()
            times.append((clock() - start) * 1e-9)
        return times
