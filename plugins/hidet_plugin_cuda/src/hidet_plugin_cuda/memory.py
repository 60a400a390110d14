"""Device memory: a caching allocator and `DeviceArray`.

`cuMemAlloc`/`cuMemFree` synchronise the device and cost tens of microseconds, far
more than many kernels; a compiled graph allocates the same sizes over and over. So
freed blocks go back into size-class bins and are handed out again. Blocks are
assumed to be used on the stream they were allocated for (the default stream unless
told otherwise): work queued on one stream runs in order, so a block freed after its
last launch can be reused by the next launch on the same stream without a sync.
"""
from __future__ import annotations

import math
import threading
from collections import defaultdict
from typing import Any, Sequence

from . import dlpack, driver
from .dtypes import DType, dtype as as_dtype, numpy_dtype
from .errors import CudaDriverError

_SMALL_LIMIT = 1 << 20  # below 1 MiB: classes every 512 bytes
_SMALL_STEP = 512
_CLASSES_PER_OCTAVE = 8  # above: 8 classes per power of two, at most 12.5% waste


def size_class(nbytes: int) -> int:
    """The size actually allocated for a request of `nbytes` (bins are per class)."""
    nbytes = max(1, int(nbytes))
    if nbytes <= _SMALL_LIMIT:
        return -(-nbytes // _SMALL_STEP) * _SMALL_STEP
    step = (1 << (nbytes.bit_length() - 1)) // _CLASSES_PER_OCTAVE
    return -(-nbytes // step) * step


class Block:
    """One allocation; returned to its allocator when garbage collected."""

    __slots__ = ("ptr", "size", "allocator", "__weakref__")

    def __init__(self, ptr: int, size: int, allocator: "CachingAllocator"):
        self.ptr = ptr
        self.size = size
        self.allocator = allocator

    def __del__(self):
        allocator, self.allocator = self.allocator, None
        if allocator is not None:
            allocator._release(self.ptr, self.size)


class CachingAllocator:
    """Size-class bins of freed device blocks of one device, reused before allocating."""

    def __init__(self, ordinal: int = 0):
        self.ordinal = ordinal
        self._bins: dict[int, list[int]] = defaultdict(list)
        self._lock = threading.Lock()
        self.allocated_bytes = 0  # in live blocks
        self.cached_bytes = 0  # in bins, ready for reuse
        self.device_allocations = 0  # calls of cuMemAlloc, for tests and reports

    def malloc(self, nbytes: int) -> Block:
        size = size_class(nbytes)
        with self._lock:
            free = self._bins.get(size)
            if free:
                ptr = free.pop()
                self.cached_bytes -= size
                self.allocated_bytes += size
                return Block(ptr, size, self)
        driver.set_current_device(self.ordinal)
        try:
            ptr = int(driver.call("cuMemAlloc", size))
        except CudaDriverError as exc:
            if exc.name != "CUDA_ERROR_OUT_OF_MEMORY":
                raise
            self.empty_cache()  # give cached blocks back to the driver and try once more
            ptr = int(driver.call("cuMemAlloc", size))
        with self._lock:
            self.device_allocations += 1
            self.allocated_bytes += size
        return Block(ptr, size, self)

    def _release(self, ptr: int, size: int) -> None:
        with self._lock:
            self._bins[size].append(ptr)
            self.allocated_bytes -= size
            self.cached_bytes += size

    def empty_cache(self) -> None:
        """Free every cached block back to the driver (live blocks are untouched)."""
        with self._lock:
            bins, self._bins = self._bins, defaultdict(list)
            self.cached_bytes = 0
        for ptrs in bins.values():
            for ptr in ptrs:
                try:
                    driver.call("cuMemFree", ptr)
                except Exception:  # interpreter shutdown: the driver may be gone already
                    pass


_allocators: dict[int, CachingAllocator] = {}


def allocator(ordinal: int = 0) -> CachingAllocator:
    alloc = _allocators.get(ordinal)
    if alloc is None:
        alloc = _allocators.setdefault(ordinal, CachingAllocator(ordinal))
    return alloc


def _compact_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for extent in reversed(shape):
        strides.append(acc)
        acc *= max(1, extent)
    return tuple(reversed(strides))


class DeviceArray:
    """A typed view of device memory: pointer, shape, dtype, strides (in elements).

    `owner` is whatever keeps the memory alive: an allocator `Block`, an imported
    DLPack tensor, or another object.
    """

    def __init__(self, ptr: int, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None,
                 *, device_id: int = 0, owner: Any = None):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype: DType = as_dtype(dtype)
        self.strides = tuple(int(s) for s in strides) if strides is not None else _compact_strides(self.shape)
        self.device_id = device_id
        self.owner = owner

    # -- facts --------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def is_contiguous(self) -> bool:
        """Compact row-major (extents of 1 may have any stride)."""
        expected = _compact_strides(self.shape)
        return all(e == 1 or s == x for e, s, x in zip(self.shape, self.strides, expected))

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, device=cuda:{self.device_id})"

    # -- creation -----------------------------------------------------------------
    @classmethod
    def empty(cls, shape: Sequence[int], dtype: Any, *, device_id: int = 0) -> "DeviceArray":
        dt = as_dtype(dtype)
        nbytes = math.prod(int(s) for s in shape) * dt.itemsize
        block = allocator(device_id).malloc(nbytes)
        return cls(block.ptr, shape, dt, device_id=device_id, owner=block)

    @classmethod
    def from_numpy(cls, array: Any, *, device_id: int = 0, stream: Any = None, dtype: Any = None) -> "DeviceArray":
        """Copy a numpy array to a new device array (synchronously unless `stream`).
        `dtype` names the device dtype when the numpy dtype can't (bfloat16 bits in uint16)."""
        import numpy as np

        host = np.asarray(array, order="C")  # keeps 0-d arrays 0-d (ascontiguousarray makes them 1-d)
        out = cls.empty(host.shape, dtype or host.dtype, device_id=device_id)
        out.copy_from_host(host, stream=stream)
        return out

    @classmethod
    def from_dlpack(cls, obj: Any, *, stream: int | None = 1) -> "DeviceArray":
        """View a CUDA tensor of another library (torch, cupy...) without copying.

        `stream` is the consumer stream passed to ``__dlpack__`` (1 = the legacy
        default stream, the stream this runtime launches on unless told otherwise)."""
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"{type(obj).__name__} does not support DLPack (__dlpack__ missing)")
        device_type, device_id = obj.__dlpack_device__()
        if int(device_type) not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
            raise TypeError(f"{type(obj).__name__} lives on DLPack device type {int(device_type)}, not CUDA "
                            "(2); copy host arrays to the device first (CudaDevice.from_numpy)")
        try:
            capsule = obj.__dlpack__(stream=stream)
        except TypeError:  # producers predating the stream keyword
            capsule = obj.__dlpack__()
        imported = dlpack.from_capsule(capsule, producer=obj)
        return cls(imported.data_ptr, imported.shape, imported.dtype, imported.strides,
                   device_id=imported.device_id, owner=imported.owner)

    # -- DLPack export ------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        return (dlpack.KDL_CUDA, self.device_id)

    def __dlpack__(self, *, stream: int | None = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """Export as an (unversioned) DLPack capsule; no copy. Work queued by this
        runtime on the legacy default stream is ordered before any blocking consumer
        stream; other consumer streams are made to wait with an event."""
        if copy:
            raise BufferError("DeviceArray exports without copying only")
        if stream is not None and stream not in (-1, 0, 1):
            self._order_before(stream)
        return dlpack.to_capsule(self.ptr, self.shape, self.strides, self.dtype,
                                 dlpack.KDL_CUDA, self.device_id, owner=self)

    def _order_before(self, consumer_stream: int) -> None:
        drv = driver.cuda_driver()
        driver.set_current_device(self.device_id)
        event = driver.call("cuEventCreate", drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        driver.call("cuEventRecord", event, driver.stream_handle(0))
        driver.call("cuStreamWaitEvent", driver.stream_handle(consumer_stream), event, 0)
        driver.call("cuEventDestroy", event)  # the wait keeps what it needs

    # -- copies -------------------------------------------------------------------
    def copy_from_host(self, host: Any, *, stream: Any = None) -> None:
        """Copy a C-contiguous numpy array of the same byte size into this array.
        With a stream the copy is asynchronous: keep `host` alive until it is done."""
        self._check_copyable(host.nbytes)
        driver.set_current_device(self.device_id)
        if stream is None:
            driver.call("cuMemcpyHtoD", self.ptr, host.ctypes.data, host.nbytes)
        else:
            driver.call("cuMemcpyHtoDAsync", self.ptr, host.ctypes.data, host.nbytes,
                        driver.stream_handle(stream))

    def copy_to_host(self, host: Any, *, stream: Any = None) -> None:
        self._check_copyable(host.nbytes)
        driver.set_current_device(self.device_id)
        if stream is None:
            driver.call("cuMemcpyDtoH", host.ctypes.data, self.ptr, host.nbytes)
        else:
            driver.call("cuMemcpyDtoHAsync", host.ctypes.data, self.ptr, host.nbytes,
                        driver.stream_handle(stream))

    def _check_copyable(self, host_nbytes: int) -> None:
        if not self.is_contiguous():
            raise ValueError("copies need a contiguous DeviceArray; this one is strided")
        if host_nbytes != self.nbytes:
            raise ValueError(f"size mismatch: host {host_nbytes} bytes, device {self.nbytes} bytes")

    def to_numpy(self, *, stream: Any = None) -> Any:
        """A new numpy array with this array's contents (waits for the copy).
        bfloat16 comes back as ml_dtypes.bfloat16, or raw uint16 bits without it."""
        import numpy as np

        host = np.empty(self.shape, dtype=numpy_dtype(self.dtype))
        self.copy_to_host(host, stream=stream)
        if stream is not None:
            driver.call("cuStreamSynchronize", driver.stream_handle(stream))
        return host

    def copy_(self, other: "DeviceArray") -> None:
        """Device-to-device copy of `other` into this array (same byte size)."""
        if other.nbytes != self.nbytes or not (self.is_contiguous() and other.is_contiguous()):
            raise ValueError("copy_ needs contiguous arrays of the same byte size")
        driver.set_current_device(self.device_id)
        driver.call("cuMemcpyDtoD", self.ptr, other.ptr, self.nbytes)

    def fill_bytes(self, byte: int) -> None:
        """Set every byte to `byte` (e.g. 0xFF poisons float outputs with NaN)."""
        driver.set_current_device(self.device_id)
        driver.call("cuMemsetD8", self.ptr, int(byte) & 0xFF, self.nbytes)
