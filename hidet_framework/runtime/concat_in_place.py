"""Concatenations that cost no launch: the producers write straight into the joined buffer.

A concat along an axis whose leading extents are all 1 (channels of a batch-1 NCHW
image, Inception-V3's eleven joins) puts each input, whole, in one contiguous run of
the output's row-major bytes. When every input is an intermediate that another
operator of the graph writes, the memory plan can place each input's buffer at its run
inside the output's buffer: the producers' stores then put every element where the
concat's kernel would have copied it, and the concat's launch is dropped. Inputs keep
their own shapes (views at an offset), so no kernel changes.

Which tasks are such placements is decided from the compute definition, exactly, the way
``fusion/view_epilogue.py`` decides views: one output; its value a tree of
``if_then_else`` over index conditions whose leaves are plain reads of inputs of the
output's dtype; evaluated for every output position at once with integer numpy
arithmetic, input k is read at exactly the positions ``[start_k, start_k + size_k)`` of
the output's flat order, at its own flat position ``position - start_k``, every index
inside its extent. A concat whose inputs cannot all be placed (a graph input or output,
a constant, an input given twice, a part another placement already holds, a run not on
the arena's alignment) runs as before.

On by default on the cpu target (measured there: docs/perf_notes.md, session 13);
``HIDET_FRAMEWORK_CONCAT_IN_PLACE=1`` (or ``0``) turns it on (off) for every target.
"""
from __future__ import annotations

import os
from typing import Any

import attrs
import numpy as np

from hidet_framework.compute.task import Task
from hidet_framework.fusion.view_epilogue import CHUNK, MAX_ELEMENTS, index_values
from hidet_framework.ir.expr import BinaryOp, IfThenElse, TensorElement, UnaryOp

ENV_CONCAT_IN_PLACE = "HIDET_FRAMEWORK_CONCAT_IN_PLACE"
DEFAULT_TARGETS = ("cpu",)
_COMPARE = {"lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
            "and": np.logical_and, "or": np.logical_or}


def concat_in_place_enabled(target: str | None) -> bool:
    """The switch (1 or 0) for every target; unset, on for the targets of DEFAULT_TARGETS."""
    value = os.environ.get(ENV_CONCAT_IN_PLACE, "").strip().lower()
    if value:
        return value in {"1", "true", "yes", "on"}
    return target in DEFAULT_TARGETS


@attrs.frozen
class PlacedConcat:
    """Stands in for the compiled task of a concat whose inputs are written in place:
    no workspace, no launch."""

    workspace: tuple = ()
    scheduled: Any = None

    def bind(self, inputs: Any, outputs: Any, workspace: Any) -> list:
        return []


def _condition(e: Any, env: dict) -> Any:
    """A boolean index condition on integer arrays; None for anything else."""
    if isinstance(e, UnaryOp) and e.op == "not":
        a = _condition(e.a, env)
        return None if a is None else np.logical_not(a)
    if isinstance(e, BinaryOp) and e.op in _COMPARE:
        logical = e.op in ("and", "or")
        a = _condition(e.a, env) if logical else index_values(e.a, env)
        b = _condition(e.b, env) if logical else index_values(e.b, env)
        return None if a is None or b is None else _COMPARE[e.op](a, b)
    return None


def _select(e: Any, env: dict, inputs: dict, n: int) -> tuple | None:
    """(input number, flat offset into it, every index in range) per output position."""
    if isinstance(e, TensorElement) and id(e.base) in inputs:
        k, shape = inputs[id(e.base)]
        flat, inside = np.zeros(n, np.int64), np.ones(n, bool)
        if len(e.indices) != len(shape):
            return None
        for index, extent in zip(e.indices, shape):
            got = index_values(index, env)
            if got is None:
                return None
            got = np.broadcast_to(np.asarray(got, np.int64), (n,))
            inside &= (got >= 0) & (got < extent)
            flat = flat * extent + got
        return np.full(n, k, np.int64), flat, inside
    if isinstance(e, IfThenElse):
        cond = _condition(e.cond, env)
        a = _select(e.then_expr, env, inputs, n)
        b = _select(e.else_expr, env, inputs, n)
        if cond is None or a is None or b is None:
            return None
        cond = np.broadcast_to(np.asarray(cond, bool), (n,))
        return tuple(np.where(cond, x, y) for x, y in zip(a, b))
    return None


_PLACEMENTS: dict[str, tuple | None] = {}


def placement(task: Task) -> tuple[int, ...] | None:
    """The start of each input (a flat element offset into the one output) when the
    task's output is its inputs placed whole, each as one contiguous run; else None
    (memoized by the task's fingerprint)."""
    key = task.fingerprint()
    if key not in _PLACEMENTS:
        _PLACEMENTS[key] = _placement(task)
    return _PLACEMENTS[key]


def _placement(task: Task) -> tuple[int, ...] | None:
    if len(task.outputs) != 1 or not task.inputs:
        return None
    out = task.outputs[0]
    if out.definition is None or any(t.dtype is not out.dtype for t in task.inputs):
        return None
    try:
        out_shape = [int(s) for s in out.shape]
        shapes = [[int(s) for s in t.shape] for t in task.inputs]
    except TypeError:  # symbolic extents
        return None
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    n = int(np.prod(out_shape, dtype=np.int64))
    if min(sizes) == 0 or sum(sizes) != n or n > MAX_ELEMENTS:
        return None
    value = task.inlined_value(out)
    inputs = {id(t): (k, s) for k, (t, s) in enumerate(zip(task.inputs, shapes))}
    starts: dict[int, int] = {}
    for first in range(0, n, CHUNK):
        positions = np.arange(first, min(n, first + CHUNK), dtype=np.int64)
        grids = np.unravel_index(positions, out_shape) if out_shape else ()
        env = dict(zip(out.definition.axes, (np.asarray(g, np.int64) for g in grids)))
        got = _select(value, env, inputs, len(positions))
        if got is None:
            return None
        which, flat, inside = got
        if not inside.all():
            return None
        for k in np.unique(which):
            k = int(k)
            mine = which == k
            pos = positions[mine]
            starts.setdefault(k, int(pos[0]))
            if not np.array_equal(flat[mine], pos - starts[k]):
                return None
    # Input k is read at distinct positions p with p - start_k inside it, so at most
    # size_k of them; every position reads one input and the sizes add up to the
    # positions: so each input is read exactly at [start_k, start_k + size_k).
    return tuple(starts[k] for k in range(len(sizes)))


def place_concats(graph: Any, alignment: int) -> dict[int, list[tuple[int, int]]]:
    """Operator index -> [(input tensor uid, byte offset into the output)] for the
    concats of `graph` whose inputs can all be written in place (module docstring)."""
    producer = {t.uid: k for k, op in enumerate(graph.nodes) for t in op.outputs}
    graph_ends = {t.uid for t in graph.inputs} | {t.uid for t in graph.outputs}
    placed_parts: set[int] = set()
    placed_outputs: set[int] = set()
    result: dict[int, list[tuple[int, int]]] = {}
    for k, op in enumerate(graph.nodes):
        # (one input placed whole is a view, a reshape: fusion's business, view_epilogue.py)
        if len(op.inputs) < 2 or len(op.outputs) != 1 or op.outputs[0].uid in graph_ends:
            continue
        uids = [t.uid for t in op.inputs]
        if len(set(uids)) != len(uids) or any(
                t.is_constant() or t.uid in graph_ends or t.uid in placed_parts or t.uid in placed_outputs
                or producer.get(t.uid, k) >= k for t in op.inputs):
            continue
        starts = placement(op.task)
        if starts is None:
            continue
        itemsize = op.outputs[0].dtype.nbytes
        if any(s * itemsize % alignment for s in starts):
            continue
        result[k] = [(t.uid, s * itemsize) for t, s in zip(op.inputs, starts)]
        placed_parts.update(uids)
        placed_outputs.add(op.outputs[0].uid)
    return result
