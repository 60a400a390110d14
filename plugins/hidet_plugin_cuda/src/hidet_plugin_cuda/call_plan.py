"""Zero-copy calls of a compiled graph on CUDA: inputs bound where they lie.

A compiled graph (``hidet_framework.runtime.compiled_graph``) asks its device for a
call plan (`CudaDevice.call_plan`) once, with its bound launches and the places where
graph inputs and outputs enter them (``CallSites``). Per call, `CudaCallPlan.run`:

- torch CUDA tensors in: each input's ``data_ptr()`` is bound directly (no DLPack
  capsule, no staging copy); outputs are new torch tensors from torch's caching
  allocator on the caller's current stream, which the kernels write; everything runs
  on ``torch.cuda.current_stream()``, with no sync to the default stream.
- `DeviceArray`s in: bound directly; outputs are new DeviceArrays; legacy default stream.
- other CUDA DLPack tensors (cupy...): imported through DLPack (no copy), run as
  DeviceArrays, and the outputs handed back through the producer library's
  ``from_dlpack`` (cupy in, cupy out).

An input that is strided is made contiguous first, and one whose address is not a
multiple of `ALIGNMENT` (a view at an offset) is copied into fresh memory: the
kernels were built for arena buffers, which are that aligned, and some read 16 bytes
at a time (the reduce and matmul templates' vector paths). `out=` arrays must be
contiguous and of the output's dtype and shape; a misaligned one is written through a
fresh buffer and a copy. Anything else returns None and the compiled graph takes its
copying path (numpy, host tensors), which checks and explains what is wrong.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Sequence

from .cuda_graph import LaunchPlan
from .memory import DeviceArray

ALIGNMENT = 256  # the arena's alignment (hidet_framework.runtime.memory_plan.ALIGNMENT)


def _error(message: str) -> Exception:
    from hidet_framework.runtime.compiled_task import GraphInputError

    return GraphInputError(message)


class _TorchSide:
    """What a torch call needs, looked up once: dtypes, shapes, device, stream query."""

    def __init__(self, torch: Any, inputs: Sequence[tuple], fresh: Sequence[tuple], ordinal: int) -> None:
        self.torch = torch
        self.tensor = torch.Tensor
        self.inputs = [(torch.Size(shape), getattr(torch, dtype, None)) for shape, dtype in inputs]
        self.fresh = [(tuple(shape), getattr(torch, dtype, None)) for shape, dtype in fresh]
        self.device = torch.device("cuda", ordinal)
        self.empty = torch.empty
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.stream: Callable[[int], int] = raw if raw is not None else (
            lambda index: torch.cuda.current_stream(index).cuda_stream)
        self.usable = all(dt is not None for _, dt in self.inputs + self.fresh)


class CudaCallPlan:
    """Per-call binding of user arrays into a compiled graph's `LaunchPlan`.

    :param launches: the compiled graph's bound launches.
    :param sites: its ``CallSites`` (None when some input cannot be bound directly:
        then only the copying path runs, still through the plan's launches).
    :param constant: a graph output that is a constant tensor -> its device array.
    :param mode: the `LaunchPlan` mode (``"update"``, ``"copy"`` or None).
    """

    def __init__(self, launches: Sequence[tuple], sites: Any, constant: Callable[[Any], Any],
                 mode: str | None, ordinal: int = 0) -> None:
        self.ordinal = ordinal
        self._sites = sites
        groups, nbytes, self._in_groups = [], [], []
        if sites is not None:
            from .dtypes import dtype as as_dtype

            size = lambda shape, dt: math.prod(shape) * as_dtype(dt).itemsize  # noqa: E731
            for k in sorted(sites.input_sites):
                self._in_groups.append(k)
                groups.append(sites.input_sites[k])
                nbytes.append(size(*sites.inputs[k]))
            self._fresh = [None] * len(sites.output_sites)
            for kind, payload, shape, dt in sites.outputs:
                if kind == "fresh":
                    self._fresh[payload] = (tuple(shape), dt)
            for j in range(len(sites.output_sites)):
                groups.append(sites.output_sites[j])
                nbytes.append(size(*self._fresh[j]))
            self._outputs = [(kind, constant(payload) if kind == "constant" else payload)
                             for kind, payload, _, _ in sites.outputs]
            self._direct_outputs = [kind for kind, _ in self._outputs] == ["fresh"] * len(self._outputs) and \
                [p for _, p in self._outputs] == list(range(len(self._outputs)))
            self._all_in_groups = self._in_groups == list(range(len(sites.inputs)))
        self.launch = LaunchPlan(launches, groups, nbytes, len(self._in_groups), mode, ordinal)
        self._torch: _TorchSide | None = None
        self._torch_type: Any = None

    @property
    def uses_graph(self) -> bool:
        return self.launch.uses_graph

    def run_arena(self) -> None:
        """Launch bound to the arena on the legacy default stream (the copying path)."""
        self.launch.run(self.launch.defaults, 0)

    def before_host_copies(self) -> None:
        self.launch.before_host_copies()

    # ------------------------------------------------------------------ per call
    def run(self, arrays: Sequence[Any], out: Sequence[Any] | None) -> list | None:
        """The outputs, or None when these inputs take the copying path (nothing ran)."""
        sites = self._sites
        if sites is None or not arrays or len(arrays) != len(sites.inputs):
            return None
        first = arrays[0]
        kind = type(first)
        if kind is self._torch_type:
            return self._run_torch(arrays, out)
        if kind is DeviceArray:
            return self._run_arrays(list(arrays), out, None)
        module = kind.__module__.partition(".")[0]
        if module == "torch":
            torch = sys.modules["torch"]
            if self._torch is None and isinstance(first, torch.Tensor):
                side = _TorchSide(torch, sites.inputs, self._fresh, self.ordinal)
                if not side.usable:
                    return None
                self._torch, self._torch_type = side, torch.Tensor
            return self._run_torch(arrays, out) if isinstance(first, torch.Tensor) else None
        if module == "numpy" or not hasattr(first, "__dlpack_device__"):
            return None
        if any(int(a.__dlpack_device__()[0]) != 2 for a in arrays if hasattr(a, "__dlpack_device__")):
            return None
        try:
            imported = [a if type(a) is DeviceArray else DeviceArray.from_dlpack(a) for a in arrays]
        except (TypeError, BufferError):
            return None
        return self._run_arrays(imported, out, getattr(sys.modules.get(module), "from_dlpack", None))

    def _run_torch(self, arrays: Sequence[Any], out: Sequence[Any] | None) -> list | None:
        side, ordinal = self._torch, self.ordinal
        tensor, ptrs, keep = side.tensor, [], []
        for x, (shape, dt) in zip(arrays, side.inputs):
            if type(x) is not tensor and not isinstance(x, tensor) or x.dtype is not dt or x.shape != shape \
                    or x.get_device() != ordinal:
                return None  # host tensors, other devices, wrong dtypes or shapes: the copying path
            p = x.data_ptr()
            if p % ALIGNMENT or not x.is_contiguous():
                x = x.contiguous() if not x.is_contiguous() else x.clone()
                if x.data_ptr() % ALIGNMENT:
                    x = x.clone()
                keep.append(x)
                p = x.data_ptr()
            ptrs.append(p)
        if not self._all_in_groups:
            ptrs = [ptrs[k] for k in self._in_groups]
        empty, device = side.empty, side.device
        fresh = [empty(shape, dtype=dt, device=device) for shape, dt in side.fresh]
        if out is not None:
            self._torch_out(out, fresh, arrays)
        for o in fresh:
            ptrs.append(o.data_ptr())
        self.launch.run(ptrs, side.stream(ordinal))
        del keep  # torch's allocator is stream-ordered: later work on this stream reuses it safely
        if self._direct_outputs and out is None:
            return fresh
        results = []
        for n, (kind, payload) in enumerate(self._outputs):
            if kind == "fresh":
                value = fresh[payload]
            elif kind == "echo":
                value = arrays[payload].clone()
            elif kind == "constant":
                value = side.torch.from_dlpack(payload).clone()
            else:
                value = fresh[payload].clone()
            if out is not None and value is not out[n]:
                out[n].copy_(value)
                value = out[n]
            results.append(value)
        return results

    def _torch_out(self, out: Sequence[Any], fresh: list, arrays: Sequence[Any]) -> None:
        """Check the caller's `out` tensors and put aligned ones in place of fresh ones
        (the kernels write them; the others are copied into after the launch)."""
        side = self._torch
        if len(out) != len(self._outputs):
            raise _error(f"out= takes {len(self._outputs)} tensors (one per graph output), got {len(out)}")
        spans = [(a.data_ptr(), a.data_ptr() + a.numel() * a.element_size()) for a in arrays]
        for n, (target, (kind, payload)) in enumerate(zip(out, self._outputs)):
            shape, dt = (side.fresh[payload] if kind in ("fresh", "copy") else (None, None))
            if not isinstance(target, side.tensor) or target.get_device() != self.ordinal \
                    or not target.is_contiguous() or (dt is not None and (target.dtype is not dt
                                                                          or tuple(target.shape) != shape)):
                got = f"{target.dtype}{list(target.shape)}" if isinstance(target, side.tensor) else type(target).__name__
                want = f"{dt}{list(shape)}" if dt is not None else "the output's dtype and shape"
                raise _error(f"out[{n}] must be a contiguous torch tensor {want} on cuda:{self.ordinal}, got {got}")
            lo, hi = target.data_ptr(), target.data_ptr() + target.numel() * target.element_size()
            if any(lo < b and a < hi for a, b in spans):
                raise _error(f"out[{n}] overlaps an input: the kernels would read what they write")
            if kind == "fresh" and not lo % ALIGNMENT:
                fresh[payload] = target

    def _run_arrays(self, arrays: list, out: Sequence[Any] | None, wrap: Callable | None) -> list | None:
        sites, ptrs = self._sites, []
        for k, (x, (shape, dt)) in enumerate(zip(arrays, sites.inputs)):
            if type(x) is not DeviceArray or x.dtype.name != dt or x.shape != tuple(shape) \
                    or x.device_id != self.ordinal:
                return None
            if x.ptr % ALIGNMENT or not x.is_contiguous():
                if not x.is_contiguous():
                    return None  # strided device arrays: the copying path copies them
                copy = DeviceArray.empty(x.shape, x.dtype, device_id=self.ordinal)
                copy.copy_(x)
                arrays[k] = x = copy
            ptrs.append(x.ptr)
        if not self._all_in_groups:
            ptrs = [ptrs[k] for k in self._in_groups]
        if out is not None:
            raise _error("out= takes torch tensors (torch inputs) or numpy arrays (cpu target) only")
        fresh = [DeviceArray.empty(shape, dt, device_id=self.ordinal) for shape, dt in self._fresh]
        self.launch.run(ptrs + [o.ptr for o in fresh], 0)
        results = []
        for kind, payload in self._outputs:
            if kind == "fresh":
                results.append(fresh[payload])
                continue
            source = arrays[payload] if kind == "echo" else payload if kind == "constant" else fresh[payload]
            copy = DeviceArray.empty(source.shape, source.dtype, device_id=self.ordinal)
            copy.copy_(source)
            results.append(copy)
        return results if wrap is None else [wrap(r) for r in results]
