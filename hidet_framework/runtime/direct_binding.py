"""Calls of a compiled graph on host memory without copies.

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
from typing import Any, Sequence

import numpy as np

from hidet_framework.backend.signature import numpy_dtype

RECYCLE_BYTES = 1 << 20  # outputs from this size on are recycled (see DirectBinding._fresh_outputs)


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

    @classmethod
    def of(cls, graph: Any, launches: Sequence[tuple], sites: Sequence[tuple], slot: dict,
           host_arena: bool) -> "DirectBinding | None":
        """The binding for a compiled graph, or None where calls must copy."""
        if not host_arena:
            return None
        by_uid: dict[int, list] = {}
        for launch, arg, uid in sites:
            by_uid.setdefault(uid, []).append((launch, arg))
        input_specs, input_sites = [], {}
        position = {}
        for k, t in enumerate(graph.inputs):
            position[t.uid] = k
            input_specs.append((tuple(t.shape), numpy_dtype(t.dtype.name)))
            if t.uid in slot:
                if t.uid not in by_uid:
                    return None  # read through a buffer this cannot see: keep copying
                input_sites[k] = by_uid[t.uid]
        outputs, output_sites, fresh_index = [], {}, {}
        for t in graph.outputs:
            shape, dtype = tuple(t.shape), numpy_dtype(t.dtype.name)
            if t.uid in position:  # a graph input returned as an output
                outputs.append(("echo", position[t.uid], shape, dtype))
            elif t.is_constant():
                outputs.append(("constant", np.asarray(t.storage), shape, dtype))
            elif t.uid in slot and t.uid in by_uid:
                if t.uid in fresh_index:
                    outputs.append(("copy", fresh_index[t.uid], shape, dtype))
                    continue
                fresh_index[t.uid] = len(output_sites)
                output_sites[len(output_sites)] = by_uid[t.uid]
                outputs.append(("fresh", fresh_index[t.uid], shape, dtype))
            else:
                return None
        return cls(launches, input_specs, input_sites, outputs, output_sites)

    def run(self, arrays: Sequence[Any], out: Sequence[Any] | None) -> list[Any] | None:
        """Run with `arrays` bound in place; the outputs, or None when an input needs
        the copying path (nothing has run then)."""
        ins = []
        for value, (shape, dtype) in zip(arrays, self._input_specs):
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape \
                    or not value.flags.c_contiguous or not value.flags.aligned:
                return None
            ins.append(value)
        fresh = self._outputs_for(out, ins)
        for fn, args, changes in self._plan:
            if changes:
                args = list(args)
                for arg, kind, k in changes:
                    args[arg] = fresh[k] if kind else ins[k]
            fn(*args)
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
        spares = self.__dict__.setdefault("_spares", {})
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
