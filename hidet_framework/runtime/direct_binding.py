"""Calls of a compiled graph without copies: where inputs and outputs enter the
bound launches (`CallSites`), the cpu target's binding (`DirectBinding`), and the
hook through which a device binds its own arrays (`device_call_plan`; cuda's is
``hidet_plugin_cuda.call_plan``, docs/call_path.md).

A compiled graph binds every launch to views of its arena at compile time. On a host
arena (the cpu target) a call need not copy anything: a numpy input of the graph's
dtype and shape that is C-contiguous is passed to the kernels where it lies (kernels
never write graph inputs), and each graph output is a fresh array (or the caller's
``out=`` array) that the kernels write directly, in place of the arena view they were
bound to. Only the launch arguments that name a graph input or output change per call;
the rest (intermediates, workspaces, weights) stay as bound.

Which arguments those are is found once, by identity: ``task.bind`` returns the
buffer objects it was given (`CompiledTaskLike.bind`), so an argument that *is* the
view of a graph input or output is a site to substitute. Anything this cannot serve
(an input of another type, strides, byte order) takes the copying path unchanged.
"""
from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Sequence

import attrs
import numpy as np

from hidet_framework.backend.signature import numpy_dtype

RECYCLE_BYTES = 1 << 20  # outputs from this size on are recycled (see DirectBinding._fresh_outputs)


@attrs.frozen
class CallSites:
    """Where a compiled graph's inputs and outputs enter its bound launches.

    :param inputs: per graph input, (shape, dtype name).
    :param input_sites: graph input index -> [(launch, argument)] reading it.
    :param outputs: per graph output, (kind, payload, shape, dtype name): ``fresh``
        (payload: index of a fresh buffer the kernels write), ``copy`` (a second output
        of the same tensor: a copy of fresh buffer `payload`), ``echo`` (graph input
        `payload` returned as is) or ``constant`` (payload: the constant Tensor).
    :param output_sites: fresh buffer index -> [(launch, argument)] writing it.
    """

    inputs: tuple
    input_sites: dict
    outputs: tuple
    output_sites: dict


def call_sites(graph: Any, sites: Sequence[tuple], slot: dict) -> CallSites | None:
    """The CallSites of a compiled graph from its bound argument sites ((launch,
    argument, tensor uid), found by identity), or None where an input or output is
    read or written through a buffer the sites do not show (calls must copy)."""
    by_uid: dict[int, list] = {}
    for launch, arg, uid in sites:
        by_uid.setdefault(uid, []).append((launch, arg))
    inputs, input_sites, position = [], {}, {}
    for k, t in enumerate(graph.inputs):
        position[t.uid] = k
        inputs.append((tuple(t.shape), t.dtype.name))
        if t.uid in slot:
            if t.uid not in by_uid:
                return None
            input_sites[k] = by_uid[t.uid]
    outputs, output_sites, fresh_index = [], {}, {}
    for t in graph.outputs:
        shape, dtype = tuple(t.shape), t.dtype.name
        if t.uid in position:  # a graph input returned as an output
            outputs.append(("echo", position[t.uid], shape, dtype))
        elif t.is_constant():
            outputs.append(("constant", t, shape, dtype))
        elif t.uid in slot and t.uid in by_uid:
            if t.uid in fresh_index:
                outputs.append(("copy", fresh_index[t.uid], shape, dtype))
                continue
            fresh_index[t.uid] = len(output_sites)
            output_sites[len(output_sites)] = by_uid[t.uid]
            outputs.append(("fresh", fresh_index[t.uid], shape, dtype))
        else:
            return None
    return CallSites(tuple(inputs), input_sites, tuple(outputs), output_sites)


def device_call_plan(device: Any, launches: Sequence[tuple], sites: CallSites | None,
                     constant: Callable[[Any], Any], cuda_graph: Any) -> tuple[Any, str | None]:
    """(plan, None) from a device that binds arrays per call itself (``device.call_plan``:
    cuda's zero-copy binding and CUDA graphs, docs/call_path.md); (None, None) from one
    that does not; (None, why) when making the plan failed (a warning says so once: the
    graph still runs, launch by launch, copying its inputs and outputs)."""
    make = getattr(device, "call_plan", None)
    if make is None:
        return None, None
    try:
        return make(launches, sites, constant, cuda_graph=cuda_graph), None
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"no zero-copy call plan for this graph (plain launches, copies): {why}",
                      RuntimeWarning, stacklevel=4)
        return None, why


class DirectBinding:
    """Per-call substitution of graph inputs and outputs into bound launches."""

    def __init__(self, launches: Sequence[tuple], input_specs: list, input_sites: dict,
                 outputs: list, output_sites: dict) -> None:
        self._launches = tuple(launches)
        self._input_specs = input_specs       # per graph input: (shape, numpy dtype)
        self._outputs = outputs                # per graph output: (kind, payload, shape, dtype)
        # launch index -> [(argument index, ("in", k) or ("out", slot))]
        changes: dict[int, list] = {}
        for k, places in input_sites.items():
            for launch, arg in places:
                changes.setdefault(launch, []).append((arg, 0, k))
        for slot, places in output_sites.items():
            for launch, arg in places:
                changes.setdefault(launch, []).append((arg, 1, slot))
        self._plan = tuple((fn, args, tuple(changes.get(i, ()))) for i, (fn, args) in enumerate(self._launches))
        self._fresh_slots = sorted(output_sites)
        # every output is fresh buffer n, in order: run() returns the fresh list as is
        self._all_fresh = all(kind == "fresh" and payload == n for n, (kind, payload, _, _) in enumerate(outputs))
        self._spares: dict = {}

    @classmethod
    def of(cls, graph: Any, launches: Sequence[tuple], sites: Sequence[tuple], slot: dict,
           host_arena: bool) -> "DirectBinding | None":
        """The binding for a compiled graph, or None where calls must copy."""
        found = call_sites(graph, sites, slot) if host_arena else None
        if found is None:
            return None
        input_specs = [(shape, numpy_dtype(dtype)) for shape, dtype in found.inputs]
        outputs = [(kind, np.asarray(payload.storage) if kind == "constant" else payload, shape, numpy_dtype(dtype))
                   for kind, payload, shape, dtype in found.outputs]
        return cls(launches, input_specs, found.input_sites, outputs, found.output_sites)

    def run(self, arrays: Sequence[Any], out: Sequence[Any] | None) -> list[Any] | None:
        """Run with `arrays` bound in place; the outputs, or None when an input needs
        the copying path (nothing has run then). Every call pays this in Python
        (issue 15: a call adds at most 5 us to its kernels), so the checks are the
        cheapest that decide: the dtype by identity first (numpy's builtin dtypes are
        singletons), the flags object fetched once."""
        if len(arrays) != len(self._input_specs):
            return None
        for value, (shape, dtype) in zip(arrays, self._input_specs):
            if type(value) is not np.ndarray or (value.dtype is not dtype and value.dtype != dtype) \
                    or value.shape != shape:
                return None
            flags = value.flags
            if not (flags.c_contiguous and flags.aligned):
                return None
        ins = arrays
        fresh = self._fresh_outputs() if out is None else self._outputs_for(out, ins)
        for fn, args, changes in self._plan:
            if changes:
                args = list(args)
                for arg, kind, k in changes:
                    args[arg] = fresh[k] if kind else ins[k]
            fn(*args)
        if out is None and self._all_fresh:
            return fresh
        results = []
        for n, (kind, payload, _, _) in enumerate(self._outputs):
            if kind == "fresh":
                value = fresh[payload]
            elif kind == "echo":
                value = np.array(ins[payload], copy=True)
            elif kind == "constant":
                value = np.array(payload, copy=True)
            else:
                value = np.array(fresh[payload], copy=True)
            if out is not None and value is not out[n]:
                np.copyto(out[n], value, casting="no")
                value = out[n]
            results.append(value)
        return results

    def _outputs_for(self, out: Sequence[Any] | None, ins: list) -> list:
        """One array per fresh output: new ones, or the caller's `out` arrays."""
        from hidet_framework.runtime.compiled_task import GraphInputError

        if out is None:
            return self._fresh_outputs()
        if len(out) != len(self._outputs):
            raise GraphInputError(f"out= takes {len(self._outputs)} arrays (one per graph output), got {len(out)}")
        fresh = [None] * len(self._fresh_slots)
        for n, (array, (kind, payload, shape, dtype)) in enumerate(zip(out, self._outputs)):
            if type(array) is not np.ndarray or array.dtype != dtype or array.shape != shape \
                    or not array.flags.c_contiguous or not array.flags.writeable:
                got = f"{array.dtype}{list(array.shape)}" if isinstance(array, np.ndarray) else type(array).__name__
                raise GraphInputError(f"out[{n}] must be a writable C-contiguous numpy array {dtype}{list(shape)}, "
                                      f"got {got}")
            if any(np.may_share_memory(array, x) for x in ins):
                raise GraphInputError(f"out[{n}] overlaps an input: the kernels would read what they write")
            if kind == "fresh" and fresh[payload] is None:
                fresh[payload] = array
        return fresh

    def _fresh_outputs(self) -> list:
        """New output arrays, except that a large one the caller has dropped since the
        last call (nothing but this binding refers to it) is handed out again: a fresh
        64 MB array costs 16k page faults on first write, more than the kernel that
        fills it on a loaded machine (onnxruntime reuses its arena the same way). An
        array still referenced anywhere (a variable, a view, an input of this call) is
        never reused."""
        spares = self._spares
        arrays = []
        for n, (kind, _, shape, dtype) in enumerate(self._outputs):
            if kind != "fresh":
                continue
            a = spares.pop(n, None)  # atomic under the GIL: one caller gets a spare
            if a is None or sys.getrefcount(a) > 2:  # 2: `a` and getrefcount's argument
                a = np.empty(shape, dtype)
            if a.nbytes >= RECYCLE_BYTES:
                spares[n] = a
            arrays.append(a)
        return arrays
