"""The CUDA driver API, through ``cuda.bindings.driver``, behind small typed helpers.

Every call goes through `check`, which turns a failing ``CUresult`` into a
`CudaDriverError` carrying the error's name. ``cuda.bindings`` is imported lazily, on
first use, so this module imports on machines without it (or without a driver).
Contexts: one primary context per device, retained once and made current on the
calling thread before any work (the primary context is what torch and cupy use too,
so pointers are shared with them).
"""
from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any, Sequence

from .errors import CudaDriverError, CudaUnavailableError

_lock = threading.Lock()
_init_error: CudaUnavailableError | None = None
_initialized = False
_contexts: dict[int, Any] = {}


@functools.lru_cache(maxsize=None)  # every driver call asks (twice): look it up once; failures are not kept
def cuda_driver():
    """The ``cuda.bindings.driver`` module, or `CudaUnavailableError` saying why not."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise CudaUnavailableError(
            f"cuda-bindings is not installed ({exc}); install 'cuda-bindings>=13.0,<14'"
        ) from None
    return driver


def _error_name(drv, err) -> tuple[str, str]:
    try:
        _, name = drv.cuGetErrorName(err)
        _, text = drv.cuGetErrorString(err)
        return name.decode(), text.decode()
    except Exception:  # the name lookup itself must never hide the real error
        return getattr(err, "name", str(err)), ""


def check(result: Any, call: str) -> Any:
    """Unpack a cuda-bindings result tuple ``(err, *values)``; raise on error.

    Returns None, the single value, or a tuple of values.
    """
    drv = cuda_driver()
    if not isinstance(result, tuple):
        result = (result,)
    err, values = result[0], result[1:]
    if err != drv.CUresult.CUDA_SUCCESS:
        name, text = _error_name(drv, err)
        raise CudaDriverError(call, int(err), name, text)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def call(name: str, *args: Any) -> Any:
    """Call driver function `name` with `args` after initialisation, checked."""
    ensure_initialized()
    drv = cuda_driver()
    return check(getattr(drv, name)(*args), name)


def ensure_initialized() -> None:
    """``cuInit`` once per process; remembers (and re-raises) why it failed."""
    global _initialized, _init_error
    if _initialized:
        return
    with _lock:
        if _initialized:
            return
        if _init_error is not None:
            raise _init_error
        drv = cuda_driver()
        try:
            result = drv.cuInit(0)
        except Exception as exc:  # libcuda.so missing: cuda-bindings raises its own error type
            _init_error = CudaUnavailableError(
                f"the NVIDIA driver library (libcuda) could not be loaded: {exc}"
            )
            raise _init_error from None
        try:
            check(result, "cuInit")
        except CudaDriverError as exc:
            _init_error = CudaUnavailableError(f"cuInit failed: {exc.name}: {exc.description}")
            raise _init_error from None
        _initialized = True


def device_count() -> int:
    return int(call("cuDeviceGetCount"))


def device_handle(ordinal: int = 0) -> Any:
    return call("cuDeviceGet", ordinal)


def set_current_device(ordinal: int = 0) -> Any:
    """Retain the primary context of device `ordinal` (once) and make it current on
    this thread; returns the context."""
    ensure_initialized()
    ctx = _contexts.get(ordinal)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(ordinal)
            if ctx is None:
                count = device_count()
                if not 0 <= ordinal < count:
                    raise CudaUnavailableError(f"no CUDA device {ordinal} (this machine has {count})")
                ctx = call("cuDevicePrimaryCtxRetain", device_handle(ordinal))
                _contexts[ordinal] = ctx
    call("cuCtxSetCurrent", ctx)
    return ctx


def device_attribute(attribute: str, ordinal: int = 0) -> int:
    """A device attribute by its short name, e.g. ``"MULTIPROCESSOR_COUNT"``."""
    drv = cuda_driver()
    enum = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{attribute}")
    return int(call("cuDeviceGetAttribute", enum, device_handle(ordinal)))


def device_name(ordinal: int = 0) -> str:
    raw = call("cuDeviceGetName", 256, device_handle(ordinal))
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def driver_version() -> tuple[int, int]:
    version = int(call("cuDriverGetVersion"))
    return version // 1000, (version % 1000) // 10


class CudaFunction:
    """One kernel of a loaded module."""

    def __init__(self, module: "CudaModule", name: str, handle: Any):
        self.module = module
        self.name = name
        self.handle = handle
        self._max_dynamic_smem = 48 * 1024  # the driver's default limit

    def attribute(self, attribute: str) -> int:
        """A function attribute by short name, e.g. ``"NUM_REGS"``."""
        drv = cuda_driver()
        enum = getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attribute}")
        return int(call("cuFuncGetAttribute", enum, self.handle))

    def ensure_dynamic_smem(self, nbytes: int) -> None:
        """Raise the kernel's dynamic shared memory limit when it asks for more than
        48 KB: without this the launch fails with CUDA_ERROR_INVALID_VALUE."""
        if nbytes <= self._max_dynamic_smem:
            return
        drv = cuda_driver()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        call("cuFuncSetAttribute", self.handle, attr, int(nbytes))
        self._max_dynamic_smem = int(nbytes)

    def launch(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
               *, dynamic_smem: int = 0, stream: Any = 0) -> None:
        """Launch with `args`, a sequence of ctypes scalars (pointers as c_uint64)."""
        self.ensure_dynamic_smem(dynamic_smem)
        params_address, keep_alive = pack_kernel_params(args)
        call("cuLaunchKernel", self.handle, *map(int, grid), *map(int, block),
             int(dynamic_smem), stream_handle(stream), params_address, 0)
        del keep_alive  # the driver copied the argument values during the launch call


def pack_kernel_params(args: Sequence[Any]) -> tuple[int, Any]:
    """Build the ``void**`` array cuLaunchKernel reads: one pointer per parameter,
    pointing at that parameter's value. Returns (address, objects to keep alive)."""
    array = (ctypes.c_void_p * max(1, len(args)))()
    for i, value in enumerate(args):
        array[i] = ctypes.addressof(value)
    return (ctypes.addressof(array) if args else 0), (array, list(args))


def stream_handle(stream: Any) -> Any:
    """A ``CUstream`` from None/int/our `Stream`/a CUstream (0 = legacy default)."""
    drv = cuda_driver()
    if stream is None:
        return drv.CUstream(0)
    if hasattr(stream, "handle"):
        return stream.handle
    if isinstance(stream, int):
        return drv.CUstream(stream)
    return stream


class CudaModule:
    """A cubin loaded into the current context with ``cuModuleLoadData``."""

    def __init__(self, image: bytes, ordinal: int = 0):
        set_current_device(ordinal)
        self.ordinal = ordinal
        self.handle = call("cuModuleLoadData", image)
        self._functions: dict[str, CudaFunction] = {}

    def function(self, name: str) -> CudaFunction:
        fn = self._functions.get(name)
        if fn is None:
            try:
                handle = call("cuModuleGetFunction", self.handle, name.encode())
            except CudaDriverError as exc:
                raise CudaDriverError(exc.call, exc.code, exc.name,
                                      f"no kernel named {name!r} in the module (was it declared "
                                      f"extern \"C\" __global__?)") from None
            fn = self._functions[name] = CudaFunction(self, name, handle)
        return fn

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None and _initialized:
            try:
                cuda_driver().cuModuleUnload(handle)
            except Exception:  # interpreter shutdown: the driver may be gone already
                pass
