"""A compiled graph's launches on the hot path: one CUDA graph launch per call.

`LaunchPlan` takes the bound launches of a compiled graph (``(KernelLauncher,
arguments)`` pairs over arena views and weights) and does everything once: the
arguments are checked and packed into ctypes values, each launch's ``void**``
parameter array is built, grids and shared memory are fixed, and, with ``mode`` set,
a CUDA graph of the launches is built (one kernel node per launch, each depending on
the one before, which is what capturing the sequence on a stream records) and
instantiated. A call then costs one ``cuGraphLaunch`` (or one ``cuLaunchKernel`` per
launch with ``mode=None``), made through ctypes straight into libcuda, not through
cuda-bindings' Python wrappers.

Binding per call. Some arguments name a graph input or output ("sites", grouped: one
group per graph input or fresh output). A call passes one device pointer per group;
a group whose pointer changed since the last call is written into its ctypes values
and, in graph mode, each kernel node reading it is updated with
``cuGraphExecKernelNodeSetParams`` (``mode="update"``, the default). Pointers that
repeat (torch's caching allocator hands the same blocks back) cost nothing. The
other variant, ``mode="copy"``, keeps the graph bound to the arena and copies inputs
in and outputs out with ``cuMemcpyDtoDAsync`` on the call's stream; bench/call_overhead.py
measures both (docs/perf_notes.md says which won).

Streams. The arena (intermediates, workspaces) is shared by every call, so a call on a
stream other than the last call's first makes its stream wait for an event recorded on
the last one; two streams never run one graph's launches at the same time.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Sequence

from . import driver
from .errors import CudaDriverError

_CUDA_ERROR_INVALID_CONTEXT = 201
_EVENT_DISABLE_TIMING = 2


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h): what cuGraphAddKernelNode_v2 reads."""

    _fields_ = [("func", ctypes.c_void_p),
                ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


class _Lib:
    """The libcuda entry points of the hot path, with ctypes signatures (loaded once)."""

    _instance: "_Lib | None" = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        p, u, i, ull, sz = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_size_t
        pp = ctypes.POINTER(ctypes.c_void_p)

        def fn(name: str, *argtypes: Any) -> Any:
            f = getattr(lib, name)
            f.argtypes, f.restype = list(argtypes), ctypes.c_int
            return f

        self.launch_kernel = fn("cuLaunchKernel", p, u, u, u, u, u, u, u, p, p, p)
        self.graph_launch = fn("cuGraphLaunch", p, p)
        self.graph_create = fn("cuGraphCreate", pp, u)
        self.graph_add_kernel_node = fn("cuGraphAddKernelNode_v2", pp, p, p, sz, ctypes.POINTER(KernelNodeParams))
        self.graph_instantiate = fn("cuGraphInstantiateWithFlags", pp, p, ull)
        self.exec_set_params = fn("cuGraphExecKernelNodeSetParams_v2", p, p, ctypes.POINTER(KernelNodeParams))
        self.graph_destroy = fn("cuGraphDestroy", p)
        self.exec_destroy = fn("cuGraphExecDestroy", p)
        self.memcpy_dtod_async = fn("cuMemcpyDtoDAsync_v2", ctypes.c_uint64, ctypes.c_uint64, sz, p)
        self.event_create = fn("cuEventCreate", pp, u)
        self.event_record = fn("cuEventRecord", p, p)
        self.event_destroy = fn("cuEventDestroy_v2", p)
        self.stream_wait_event = fn("cuStreamWaitEvent", p, p, u)
        self.get_error_name = fn("cuGetErrorName", i, ctypes.POINTER(ctypes.c_char_p))
        self.get_error_string = fn("cuGetErrorString", i, ctypes.POINTER(ctypes.c_char_p))

    @classmethod
    def get(cls) -> "_Lib":
        if cls._instance is None:
            with cls._lock:
                if cls._instance is None:
                    driver.ensure_initialized()  # cuInit, and a clear error without a driver
                    cls._instance = cls()
        return cls._instance

    def error(self, code: int, call: str) -> CudaDriverError:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.get_error_name(code, ctypes.byref(name))
        self.get_error_string(code, ctypes.byref(text))
        return CudaDriverError(call, code, (name.value or b"CUDA_ERROR_UNKNOWN").decode(),
                               (text.value or b"").decode())


def _check(lib: _Lib, rc: int, call: str) -> None:
    if rc:
        raise lib.error(rc, call)


class LaunchPlan:
    """Launches precomputed once; `run` binds per-call pointers and launches.

    :param launches: ``(KernelLauncher, arguments)`` per launch, in order.
    :param groups: per group (graph input or fresh output), the ``(launch, argument)``
        sites that take its pointer; the pointers bound at construction (arena views)
        are the groups' defaults.
    :param nbytes: per group, the buffer's size (the ``copy`` mode copies that much).
    :param num_inputs: how many leading groups are inputs (the rest are outputs).
    :param mode: ``"update"`` (CUDA graph, pointers set by node parameter update),
        ``"copy"`` (CUDA graph bound to the arena; copies in and out), or None (one
        ``cuLaunchKernel`` per launch).
    """

    def __init__(self, launches: Sequence[tuple], groups: Sequence[Sequence[tuple[int, int]]],
                 nbytes: Sequence[int], num_inputs: int, mode: str | None, ordinal: int = 0) -> None:
        from .kernel import pack_arguments

        if mode not in (None, "update", "copy"):
            raise ValueError(f"LaunchPlan mode must be 'update', 'copy' or None, got {mode!r}")
        self.ordinal, self.mode, self._copying = ordinal, mode, mode == "copy"
        self._lib = lib = _Lib.get()
        driver.set_current_device(ordinal)
        self._values, self._params, self._plain, self._keep = [], [], [], []
        for fn, args in launches:
            values, keep = pack_arguments(fn.spec, args)  # checks dtypes, shapes, contiguity once
            grid, block, smem = fn.launch_config(args)
            fn.function.ensure_dynamic_smem(smem)
            params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
            self._values.append(values)
            self._params.append(params)
            self._keep.append(keep)
            self._plain.append((int(fn.function.handle), *grid, *block, smem, ctypes.addressof(params)))
        self._plain = tuple(self._plain)
        self._group_values = [[self._values[li][ai] for li, ai in sites] for sites in groups]
        self._group_launches = [sorted({li for li, _ in sites}) for sites in groups]
        self.defaults = [int(vals[0].value) if vals else 0 for vals in self._group_values]
        self._current = list(self.defaults)
        self._nbytes = list(nbytes)
        self._num_inputs = num_inputs
        self._stream: int | None = None
        self._event = ctypes.c_void_p()
        _check(lib, lib.event_create(ctypes.byref(self._event), _EVENT_DISABLE_TIMING), "cuEventCreate")
        self._graph = self._exec = None
        self._nodes: list[ctypes.c_void_p] = []
        self._node_params: list[KernelNodeParams] = []
        if mode is not None and launches:
            self._build_graph()

    def _build_graph(self) -> None:
        lib, graph = self._lib, ctypes.c_void_p()
        _check(lib, lib.graph_create(ctypes.byref(graph), 0), "cuGraphCreate")
        self._graph = graph
        previous = None
        for func, gx, gy, gz, bx, by, bz, smem, params in self._plain:
            p = KernelNodeParams(func, gx, gy, gz, bx, by, bz, smem, params, None, None, None)
            node = ctypes.c_void_p()
            deps = (ctypes.c_void_p * 1)(previous.value) if previous is not None else None
            _check(lib, lib.graph_add_kernel_node(ctypes.byref(node), graph, deps, 1 if deps else 0,
                                                  ctypes.byref(p)), "cuGraphAddKernelNode")
            self._nodes.append(node)
            self._node_params.append(p)
            previous = node
        exec_ = ctypes.c_void_p()
        _check(lib, lib.graph_instantiate(ctypes.byref(exec_), graph, 0), "cuGraphInstantiate")
        self._exec = exec_

    # ---------------------------------------------------------------- per call
    def run(self, pointers: list[int], stream: int = 0) -> None:
        """Bind one pointer per group (`defaults` for the arena) and launch on `stream`."""
        if stream != self._stream:
            self._switch(stream)
        if self._copying:
            self._run_copying(pointers, stream)
            return
        if pointers != self._current:
            self._rebind(pointers)
        self._launch(stream)

    def _launch(self, stream: int) -> None:
        lib = self._lib
        if self._exec is not None:
            rc = lib.graph_launch(self._exec, stream)
            if rc:
                self._retry(rc, "cuGraphLaunch", lambda: lib.graph_launch(self._exec, stream))
            return
        launch = lib.launch_kernel
        for func, gx, gy, gz, bx, by, bz, smem, params in self._plain:
            rc = launch(func, gx, gy, gz, bx, by, bz, smem, stream, params, None)
            if rc:
                self._retry(rc, "cuLaunchKernel", lambda: launch(func, gx, gy, gz, bx, by, bz, smem, stream, params, None))

    def _retry(self, rc: int, call: str, again: Any) -> None:
        """A thread with no current context: make the primary context current, once."""
        if rc == _CUDA_ERROR_INVALID_CONTEXT:
            driver.set_current_device(self.ordinal)
            rc = again()
        _check(self._lib, rc, call)

    def _rebind(self, pointers: list[int]) -> None:
        current, dirty = self._current, set()
        for g, (new, old) in enumerate(zip(pointers, current)):
            if new != old:
                for value in self._group_values[g]:
                    value.value = new
                dirty.update(self._group_launches[g])
        if self._exec is not None:
            lib = self._lib
            for li in sorted(dirty):
                rc = lib.exec_set_params(self._exec, self._nodes[li], ctypes.byref(self._node_params[li]))
                if rc:
                    self._retry(rc, "cuGraphExecKernelNodeSetParams", lambda: lib.exec_set_params(
                        self._exec, self._nodes[li], ctypes.byref(self._node_params[li])))
        self._current = list(pointers)

    def _run_copying(self, pointers: list[int], stream: int) -> None:
        lib, defaults, k = self._lib, self.defaults, self._num_inputs
        for g in range(k):
            if pointers[g] != defaults[g]:
                _check(lib, lib.memcpy_dtod_async(defaults[g], pointers[g], self._nbytes[g], stream), "cuMemcpyDtoDAsync")
        self._launch(stream)
        for g in range(k, len(pointers)):
            if pointers[g] != defaults[g]:
                _check(lib, lib.memcpy_dtod_async(pointers[g], defaults[g], self._nbytes[g], stream), "cuMemcpyDtoDAsync")

    def _switch(self, stream: int) -> None:
        """Order `stream` after everything queued on the previous call's stream."""
        lib, last = self._lib, self._stream
        if last is not None:
            driver.set_current_device(self.ordinal)
            _check(lib, lib.event_record(self._event, last), "cuEventRecord")
            _check(lib, lib.stream_wait_event(stream, self._event, 0), "cuStreamWaitEvent")
        self._stream = stream

    def before_host_copies(self) -> None:
        """The copying path (synchronous copies on the legacy default stream) follows."""
        if self._stream not in (None, 0):
            self._switch(0)

    @property
    def uses_graph(self) -> bool:
        return self._exec is not None

    def __del__(self) -> None:
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        try:
            if self._exec is not None:
                lib.exec_destroy(self._exec)
            if self._graph is not None:
                lib.graph_destroy(self._graph)
            if self._event:
                lib.event_destroy(self._event)
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass
