"""A compiled graph: a precomputed launch list over memory planned at compile time.

Everything that can be decided once is decided in ``__init__``: every operator's task
is compiled (once per distinct fingerprint), every graph input, intermediate tensor
and task workspace gets an offset in one arena (bytes reused by lifetime, see
``memory_plan``), weights are copied to the device once and stay there, and each
launch's argument list is bound to views of the arena. A call then only checks and
copies the inputs in, runs ``fn(*args)`` for each launch, and copies the outputs out.

Tasks are compiled by a function the driver passes in (`compile_operator`): this
module sits below the driver and never imports it.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import attrs
import numpy as np

from hidet_framework.backend.signature import numpy_dtype
from hidet_framework.fusion.chained_task import ChainedTask
from hidet_framework.fusion.plan import GroupReport
from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.runtime.compiled_task import GraphInputError
from hidet_framework.runtime.concat_in_place import PlacedConcat, concat_in_place_enabled, place_concats
from hidet_framework.runtime.memory_plan import ALIGNMENT, MemoryPlan, graph_buffers, plan_memory
from hidet_framework.fusion.partition_fusion_groups import BOUNDARIES_STAT, GROUP_ATTRIBUTE
from hidet_framework.runtime.direct_binding import DirectBinding as _DirectBinding, call_sites as _call_sites, \
    device_call_plan as _device_call_plan
from hidet_framework.graph.tensor import Operator, Tensor


class CompiledTaskLike(Protocol):
    """What the compiled graph needs of a compiled task (the driver's CompiledTask)."""

    workspace: Sequence[Any]  # WorkspaceSpec: name, dtype, shape, nbytes

    def bind(self, inputs: Sequence[Any], outputs: Sequence[Any],
             workspace: Sequence[Any]) -> list[tuple[Callable[..., None], tuple]]: ...


@attrs.frozen
class MemoryReport:
    """Memory of a compiled graph, in bytes.

    :param peak_bytes: the arena: everything planned (inputs' staging, intermediates,
        task workspaces), with bytes reused by lifetime.
    :param intermediate_bytes: intermediate tensors (operator outputs) summed, no reuse.
    :param workspace_bytes: task workspaces summed, no reuse.
    :param input_bytes: graph inputs staged in the arena.
    :param weight_bytes: constants, resident on the device (not in the arena).
    """

    peak_bytes: int
    intermediate_bytes: int
    workspace_bytes: int
    input_bytes: int
    weight_bytes: int

    @property
    def unplanned_bytes(self) -> int:
        """What the arena's contents would take without any reuse."""
        return self.intermediate_bytes + self.workspace_bytes + self.input_bytes

    def __str__(self) -> str:
        b = _human_bytes
        return (f"peak {b(self.peak_bytes)} (arena) vs {b(self.unplanned_bytes)} without reuse "
                f"[intermediates {b(self.intermediate_bytes)}, task workspaces {b(self.workspace_bytes)}, "
                f"inputs {b(self.input_bytes)}]; weights {b(self.weight_bytes)} resident")


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _nbytes(t: Tensor) -> int:
    return t.size * t.dtype.nbytes


def _describe(shape: Sequence[int], dtype: str) -> str:
    return f"{dtype}{list(shape)}"


def _on_host(value: Any) -> bool:
    """A DLPack tensor in host memory (a CPU torch tensor): copied in like numpy."""
    device = getattr(value, "__dlpack_device__", None)
    return device is not None and int(device()[0]) == 1  # kDLCPU


def _dtype_name(dtype: Any) -> str:
    """numpy dtypes, DeviceArray dtypes and torch dtypes as one name ("float32")."""
    name = getattr(dtype, "name", None)
    return name if isinstance(name, str) else str(dtype).removeprefix("torch.")


class CompiledGraph:
    """Call with arrays (numpy; on cuda also device arrays or DLPack tensors) in graph
    input order; returns numpy arrays (one, or a tuple for several outputs).

    :param graph: the graph, after graph passes.
    :param compile_operator: compiles an operator's task for this graph's target.
    :param device: the backend's device interface (memory and copies).
    :param target: the target kind the graph runs on (``"cpu"``, ``"cuda"``...).
    :param cuda_graph: on a device that offers call plans (cuda): True or None (the
        default) replays the launches as one CUDA graph per call, ``"copy"`` the same
        with inputs and outputs copied through the arena (measured against it in
        bench/call_overhead.py), False keeps one plain launch per kernel.
    """

    def __init__(self, graph: FlowGraph, compile_operator: Callable[[Operator], CompiledTaskLike],
                 device: Any, target: str, *, pass_stats: dict | None = None,
                 cuda_graph: bool | str | None = None) -> None:
        self.graph = graph
        self.device = device
        self.target = target
        if cuda_graph not in (None, True, False, "copy"):
            raise ValueError(f"cuda_graph must be True, False or 'copy', got {cuda_graph!r}")
        self.cuda_graph = cuda_graph
        self.pass_stats = dict(pass_stats or {})
        by_fingerprint: dict[str, CompiledTaskLike] = {}
        self.tasks: list[CompiledTaskLike] = []
        self._placed = place_concats(graph, getattr(device, "view_alignment", ALIGNMENT)) \
            if concat_in_place_enabled(target) else {}
        for k, op in enumerate(graph.nodes):
            if k in self._placed:  # written in place by its inputs' producers: nothing to compile
                self.tasks.append(PlacedConcat())
                continue
            key = op.task.fingerprint()
            if key not in by_fingerprint:
                by_fingerprint[key] = compile_operator(op)
            self.tasks.append(by_fingerprint[key])
        self.num_distinct_tasks = len(by_fingerprint)
        self._plan_memory()
        self._bind()

    # ------------------------------------------------------------------ compile time
    def _plan_memory(self) -> None:
        graph = self.graph
        buffers = graph_buffers(graph, self.tasks, self._placed)
        lifetimes, self._slot, self._inside = buffers.lifetimes, buffers.slot, buffers.inside
        self._workspace_slots, self.in_place = buffers.workspace_slots, list(buffers.in_place)
        self.plan: MemoryPlan = plan_memory(lifetimes, ALIGNMENT)
        self._arena = self.device.empty((max(self.plan.arena_bytes, ALIGNMENT),), "uint8")
        totals = {kind: sum(b.nbytes for k, b in zip(buffers.kinds, lifetimes) if k == kind)
                  for kind in ("input", "intermediate", "workspace")}
        # constants read by operators, and constant graph outputs (a model may return one)
        weights = graph.constants() + [t for t in graph.outputs if t.is_constant()]
        self._weights = {t.uid: self._upload(t) for t in weights}
        self._report = MemoryReport(self.plan.arena_bytes, totals["intermediate"], totals["workspace"],
                                    totals["input"], sum(_nbytes(t) for t in graph.constants()))

    def _upload(self, t: Tensor) -> Any:
        """A constant on the device; bfloat16 carried as uint16 bits is uploaded as
        bfloat16 where the device takes a dtype (kernels check it)."""
        storage = t.storage
        if getattr(storage, "dtype", None) is not None and storage.dtype.name != t.dtype.name:
            try:
                return self.device.from_numpy(storage, dtype=t.dtype.name)
            except TypeError:  # a device whose from_numpy takes no dtype (the cpu's)
                pass
        return self.device.from_numpy(storage)

    def _view(self, slot: int, shape: Sequence[int], dtype: str, within: int = 0) -> Any:
        """The arena's bytes of buffer `slot`, from byte `within` on, as an array of
        `shape` and `dtype`."""
        offset, arena = self.plan.offsets[slot] + within, self._arena
        if isinstance(arena, np.ndarray):
            nbytes = int(np.prod(shape, dtype=np.int64)) * numpy_dtype(dtype).itemsize
            return arena[offset:offset + nbytes].view(numpy_dtype(dtype)).reshape(tuple(shape))
        view = getattr(self.device, "view", None)
        if view is not None:
            return view(arena, offset, shape, dtype)
        # Device arrays described by (pointer, shape, dtype) with an owner to keep alive.
        return type(arena)(arena.ptr + offset, tuple(shape), dtype,
                           device_id=getattr(arena, "device_id", 0), owner=arena)

    def _array_of(self, t: Tensor) -> Any:
        if t.is_constant():
            return self._weights[t.uid]
        if t.uid in self._inside:
            holder, within = self._inside[t.uid]
            return self._view(self._slot[holder], t.shape, t.dtype.name, within)
        return self._view(self._slot[t.uid], t.shape, t.dtype.name)

    def _bind(self) -> None:
        launches: list[tuple[Callable[..., None], tuple]] = []
        self._launch_counts: list[int] = []  # per operator, for the fusion report
        sites: list[tuple[int, int, int]] = []  # (launch, argument, tensor uid)
        for op, task, ws_slots in zip(self.graph.nodes, self.tasks, self._workspace_slots):
            inputs = [self._array_of(t) for t in op.inputs]
            outputs = [self._array_of(t) for t in op.outputs]
            workspace = [self._view(s, spec.shape, spec.dtype.name) for s, spec in zip(ws_slots, task.workspace)]
            bound = task.bind(inputs, outputs, workspace)
            self._launch_counts.append(len(bound))
            # where each launch takes an operator's input/output buffer: bind passes the
            # buffer objects themselves, so identity finds them (for _DirectBinding)
            for li, (_, args) in enumerate(bound):
                for j, arg in enumerate(args):
                    for t, view in list(zip(op.inputs, inputs)) + list(zip(op.outputs, outputs)):
                        if arg is view:
                            sites.append((len(launches) + li, j, t.uid))
            launches += bound
        self._launches = tuple(launches)
        self._input_views = [self._array_of(t) if t.uid in self._slot else None for t in self.graph.inputs]
        position = {t.uid: k for k, t in enumerate(self.graph.inputs)}
        host_arena = isinstance(self._arena, np.ndarray)
        self._direct = _DirectBinding.of(self.graph, self._launches, sites, self._slot, host_arena)
        # a device that binds its own arrays per call (cuda: zero copy, CUDA graphs)
        self._device_plan, self.call_plan_error = (None, None) if host_arena else _device_call_plan(
            self.device, self._launches, _call_sites(self.graph, sites, self._slot),
            lambda t: self._weights[t.uid], self.cuda_graph)
        self._fresh = False
        # per output: ("input", k) echoes input k; ("array", a) copies a device array out
        self._fetch = [("input", position[t.uid]) if t.uid in position and t.uid not in self._slot
                       else ("array", self._array_of(t)) for t in self.graph.outputs]

    # --------------------------------------------------------------------- run time
    def _check(self, k: int, value: Any) -> Any:
        t = self.graph.inputs[k]
        want = t.dtype.name
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            value = np.asarray(value, dtype=numpy_dtype(want))  # lists and scalars take the graph's dtype
        got_shape, got_dtype = tuple(int(s) for s in value.shape), _dtype_name(value.dtype)
        if isinstance(value.dtype, np.dtype) and not value.dtype.isnative:
            # numpy names '>f4' float32 too, but kernels read native byte order: refuse, never swap
            raise GraphInputError(
                f"input {k} ({t.name!r}): the array is {got_dtype} in non-native byte order "
                f"({value.dtype.str!r}); convert it first, e.g. x.astype(x.dtype.newbyteorder('='))")
        if got_dtype not in (want, numpy_dtype(want).name) or got_shape != t.shape:
            raise GraphInputError(
                f"input {k} ({t.name!r}): expected {_describe(t.shape, want)}, "
                f"got {_describe(got_shape, got_dtype)}"
                + ("" if got_dtype in (want, numpy_dtype(want).name) else " (cast it before calling: "
                   "inputs are never converted silently)"))
        return value

    def _copy_in(self, view: Any, value: Any) -> None:
        if isinstance(view, np.ndarray):
            value = np.asarray(value)
            if value.dtype != view.dtype:  # checked: bfloat16 as ml_dtypes' type vs its uint16 bits
                value = value.view(view.dtype)
            np.copyto(view, value, casting="no")
        elif isinstance(value, np.ndarray) or _on_host(value):
            view.copy_from_host(np.asarray(value, order="C"))
        else:
            if type(value) is not type(view):
                value = self.device.from_dlpack(value)
            view.copy_(value)

    def _run(self, arrays: Sequence[Any], out: Sequence[Any] | None = None) -> list[Any]:
        direct = self._direct
        if direct is not None and len(arrays) == len(self.graph.inputs):
            result = direct.run(arrays, out)
            if result is not None:
                self._fresh = True
                return result
        plan = self._device_plan
        if plan is not None:
            result = plan.run(arrays, out)
            if result is not None:
                self._fresh = True
                return result
        self._fresh = False
        if out is not None:
            raise GraphInputError("out= needs numpy outputs on the cpu target (one C-contiguous writable "
                                  "array of the output's shape and dtype per graph output), or torch CUDA "
                                  "tensors with torch CUDA inputs on cuda")
        if len(arrays) != len(self.graph.inputs):
            names = ", ".join(f"{t.name}: {_describe(t.shape, t.dtype.name)}" for t in self.graph.inputs)
            raise GraphInputError(f"the graph takes {len(self.graph.inputs)} inputs ({names}), "
                                  f"got {len(arrays)}")
        arrays = [self._check(k, a) for k, a in enumerate(arrays)]
        if plan is not None:
            plan.before_host_copies()
        for view, value in zip(self._input_views, arrays):
            if view is not None:
                self._copy_in(view, value)
        if plan is not None:
            plan.run_arena()
        else:
            for fn, args in self._launches:
                fn(*args)
        return [arrays[x] if kind == "input" else x for kind, x in self._fetch]

    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        """Run on the given inputs; outputs (one array, or a tuple) follow the inputs.

        On cuda (docs/call_path.md): torch CUDA tensors in, torch CUDA tensors out, on
        the caller's current stream; DeviceArrays in, DeviceArrays out; other CUDA
        DLPack tensors (cupy) in, the same library's arrays out; all bound where they
        lie, outputs written by the kernels into fresh memory (or `out=` torch
        tensors), no copies. numpy (and other host arrays) in, numpy out.

        On the cpu target, numpy inputs of the graph's dtype that are C-contiguous are
        read where they lie, and the outputs are fresh arrays the kernels write (or the
        `out` arrays: one array, or a sequence with one per output), so a call copies
        nothing (`_DirectBinding`); other inputs are copied into the arena first."""
        plan = self._device_plan
        if plan is not None and out is None:  # the hot path: one call into the plan
            outs = plan.run(arrays, None)
            if outs is not None:
                self._fresh = True
                return outs[0] if len(outs) == 1 else tuple(outs)
        direct = self._direct
        if direct is not None and out is None:  # the cpu target's hot path (direct_binding.py)
            outs = direct.run(arrays, None)
            if outs is not None:
                self._fresh = True
                return outs[0] if len(outs) == 1 else tuple(outs)
        if out is not None:
            out = [out] if isinstance(out, np.ndarray) or not isinstance(out, (list, tuple)) else list(out)
        outs = self._run(arrays, out)
        if not self._fresh:
            # copies: arena views are overwritten by the next call
            outs = [np.array(a, copy=True) if isinstance(a, np.ndarray) else self.device.to_numpy(a)
                    for a in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_device(self, *arrays: Any) -> Any:
        """Run and return device arrays: on cuda, what `__call__` returns for device
        inputs (torch tensors for torch, DeviceArrays, cupy arrays), and new
        DeviceArrays for host inputs; on cpu, numpy arrays. Outputs never alias the
        arena, so a later call does not overwrite them."""
        outs = []
        results = self._run(arrays)
        if self._fresh:
            return results[0] if len(results) == 1 else tuple(results)
        for a in results:
            if isinstance(a, np.ndarray):
                outs.append(np.array(a, copy=True))
                continue
            fresh = self.device.empty(a.shape, _dtype_name(a.dtype))
            if type(a) is not type(fresh):
                a = self.device.from_dlpack(a)
            fresh.copy_(a)
            outs.append(fresh)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def save(self, folder: str) -> str:
        """Write the built libraries, weights and launch plan to `folder`, for
        ``hf.load_compiled`` (see ``hidet_framework.runtime.saved_graph``)."""
        from hidet_framework.runtime.saved_graph import save_compiled

        return save_compiled(self, folder)

    # ---------------------------------------------------------------------- reports
    def memory_report(self) -> MemoryReport:
        return self._report

    @property
    def num_launches(self) -> int:
        return len(self._launches)

    def fusion_report(self) -> list[GroupReport]:
        """One row per operator of the compiled graph: a fused group (its operators,
        the anchor in brackets; ``fused`` when grafted into one kernel, ``separate``
        with the reason when a graft was impossible) or a lone operator (``single``)."""
        rows = []
        boundaries = self.pass_stats.get(BOUNDARIES_STAT, {})
        for op, task, launches in zip(self.graph.nodes, self.tasks, self._launch_counts):
            scheduled = getattr(task, "scheduled", None)
            source = getattr(scheduled, "source", "") if scheduled is not None else ""
            group = op.attributes.get(GROUP_ATTRIBUTE)
            boundary = boundaries.get(op.outputs[0].name, "") if op.outputs else ""
            if isinstance(task, PlacedConcat):
                rows.append(GroupReport(group.describe() if group is not None else op.name, "in place", 0, "",
                                        "no launch: its producers write their outputs into its buffer"))
                continue
            if group is None:
                rows.append(GroupReport(op.name, "single", launches, source, boundary))
                continue
            if isinstance(task, ChainedTask):
                rows.append(GroupReport(group.describe(), "separate", launches, source, task.fallback_reason))
            else:
                rows.append(GroupReport(group.describe(), "fused", launches, source, boundary))
        return rows

    def __repr__(self) -> str:
        return (f"CompiledGraph(target={self.target!r}, operators={len(self.graph.nodes)}, "
                f"distinct tasks={self.num_distinct_tasks}, launches={self.num_launches}, "
                f"arena={self.plan.arena_bytes} bytes)")
