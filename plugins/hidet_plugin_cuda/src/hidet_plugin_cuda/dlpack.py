"""DLPack in and out, with ctypes (no compiled helper).

Export: `to_capsule` wraps a DLManagedTensor in a PyCapsule named "dltensor". The
struct, its shape/strides arrays and a reference to the exporting object stay in
`_exported` until the consumer calls the deleter (or the capsule dies unconsumed), so
the memory outlives the exporter for as long as the consumer needs it.

Import: `from_capsule` reads the struct, renames the capsule "used_dltensor" (the
protocol's way of saying "consumed": the producer's capsule destructor then leaves it
alone) and returns the fields plus an owner object whose finalizer calls the
producer's deleter once the last view of the memory is gone.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Sequence

import attrs

from .dtypes import DType, from_dlpack_code

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# Both names must live as long as any capsule: module-level buffers never move.
_NAME = ctypes.create_string_buffer(b"dltensor")
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")

_exported: dict[int, tuple] = {}  # address of DLManagedTensor -> everything it points at
_exported_lock = threading.RLock()  # reentrant: a release may free another export


def _forget(address: int) -> Any:
    """Remove the export at `address` and return its entry, so that the caller drops
    the owner outside the lock (its release may run more deleters)."""
    with _exported_lock:
        return _exported.pop(address, None)


@_DELETER
def _deleter(managed):
    _forget(ctypes.addressof(managed.contents))


# The destructor receives the dying capsule as a raw address: never wrap it in a
# py_object (that would take a new reference to an object being deallocated), so
# these two capsule functions are bound a second time with void* arguments.
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _capsule_destructor_impl(capsule_address: int) -> None:
    # Runs when the capsule object dies. Only an unconsumed capsule (still named
    # "dltensor") owns the tensor; a consumer renamed it and calls the deleter itself.
    if _raw_is_valid(capsule_address, _NAME):
        _forget(_raw_get_pointer(capsule_address, _NAME))


_capsule_destructor = _CAPSULE_DESTRUCTOR(_capsule_destructor_impl)


def to_capsule(data_ptr: int, shape: Sequence[int], strides: Sequence[int] | None, dt: DType,
               device_type: int, device_id: int, owner: Any) -> Any:
    """A "dltensor" capsule viewing `data_ptr`; `strides` in elements; keeps `owner`
    alive until the consumer's deleter call."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(1, ndim))(*shape)
    strides_arr = (ctypes.c_int64 * max(1, ndim))(*(strides if strides is not None else ()))
    managed = DLManagedTensor()
    t = managed.dl_tensor
    t.data = data_ptr
    t.device = DLDevice(device_type, device_id)
    t.ndim = ndim
    t.dtype = DLDataType(dt.dl_code, dt.itemsize * 8, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64)) if strides is not None else None
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _deleter
    address = ctypes.addressof(managed)
    with _exported_lock:
        _exported[address] = (managed, shape_arr, strides_arr, owner)
    return _api.PyCapsule_New(address, _NAME, _capsule_destructor)


def exported_count() -> int:
    """How many exported tensors are still held for a consumer (for tests)."""
    return len(_exported)


@attrs.frozen
class ImportedTensor:
    """The fields of a consumed DLPack tensor; `owner` keeps the producer alive."""

    data_ptr: int  # data + byte_offset
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None = compact row-major
    dtype: DType
    device_type: int
    device_id: int
    owner: Any


class _ProducerOwner:
    """Calls the producer's deleter when garbage collected (the last view is gone)."""

    def __init__(self, address: int, deleter: Any, producer: Any):
        self._address = address
        self._deleter = deleter
        self._producer = producer  # the exporting object; also kept for its own sake

    def __del__(self):
        deleter, self._deleter = self._deleter, None
        if deleter:
            deleter(ctypes.cast(self._address, ctypes.POINTER(DLManagedTensor)))


def from_capsule(capsule: Any, producer: Any = None, *, consume: bool = True) -> ImportedTensor:
    """Read a "dltensor" capsule. With `consume`, take ownership (rename the capsule
    and call the producer's deleter when the returned owner dies)."""
    if not _api.PyCapsule_IsValid(capsule, _NAME):
        raise TypeError("not an unconsumed DLPack capsule (expected a PyCapsule named 'dltensor'; "
                        "versioned DLPack capsules are not supported)")
    address = _api.PyCapsule_GetPointer(capsule, _NAME)
    managed = DLManagedTensor.from_address(address)
    t = managed.dl_tensor
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if t.strides else None
    dt = from_dlpack_code(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    owner = None
    if consume:
        _api.PyCapsule_SetName(capsule, _USED_NAME)
        deleter = managed.deleter if ctypes.cast(managed.deleter, ctypes.c_void_p).value else None
        owner = _ProducerOwner(address, deleter, producer)
    return ImportedTensor(int(t.data or 0) + int(t.byte_offset), shape, strides, dt,
                          int(t.device.device_type), int(t.device.device_id), owner)
