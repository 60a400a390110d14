"""Views after an anchor: consumers that only rename the anchor's output.

A reshape (flatten, squeeze, unsqueeze) of a row-major tensor reads element ``f`` of
its input for its own flat position ``f``: its output is the same bytes under another
shape. When the members after a group's anchor are all such views (``view_tail``),
nothing needs grafting: the anchor is scheduled as a lone operator would be (the same
kernel, with the vector stores a graftable kernel gives up: GPT-2's ``[layer_norm] ->
reshape`` gets the 128-bit layer norm of BERT instead of the element one), and the
group's output is the buffer the kernel stores into, under the view's shape
(``rename_buffer``: the kernel's parameter takes that shape and each access is
regrouped to it, element for element the same address). Views after a real graft stay
grafts: those stores are rewritten anyway.

Whether a task is a view is decided from its compute definition, exactly: one input,
one output of the same dtype and size, the output's value a plain read of the input,
and the read's index, evaluated for every output position at once (integer numpy
arithmetic, C division), is the input position with the output's flat offset.

On by default on cuda, where it was measured (the H200, session 8: GPT-2's 25 layer
norms 65.0 -> 52.0 us a call; the cuda fusion tests pass with it); off on cpu and the
evaluator, where it measured no gain. ``HIDET_FRAMEWORK_VIEW_EPILOGUE=1`` (or ``0``)
turns it on (off) for every target. The partition decides it once per group
(``FusionGroup.views``).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from hidet_framework.compute.task import Task
from hidet_framework.fusion.bound_kernel import BoundKernel, tensor_param
from hidet_framework.fusion.plan import FusionError
from hidet_framework.ir.expr import BinaryOp, Constant, Expr, TensorElement, Var, const
from hidet_framework.ir.functors import IRRewriter
from hidet_framework.ir.stmt import BufferStoreStmt

ENV_VIEW_EPILOGUE = "HIDET_FRAMEWORK_VIEW_EPILOGUE"
MAX_ELEMENTS = 1 << 26  # the check evaluates one index per element (in chunks)


DEFAULT_TARGETS = ("cuda",)


def view_epilogue_enabled(target: str | None = None) -> bool:
    """The switch (1 or 0) for every target; unset, on for the targets of DEFAULT_TARGETS."""
    value = os.environ.get(ENV_VIEW_EPILOGUE, "").strip().lower()
    if value:
        return value in {"1", "true", "yes", "on"}
    return target in DEFAULT_TARGETS


def _c_div(a: Any, b: Any) -> Any:
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _c_div,
        "mod": lambda a, b: a - b * _c_div(a, b)}


def index_values(e: Expr, env: dict) -> Any:
    """`e` evaluated on integer arrays bound to its variables; None for anything else."""
    if isinstance(e, Constant):
        return int(e.value) if isinstance(e.value, (int, np.integer)) and not isinstance(e.value, bool) else None
    if isinstance(e, Var):
        return env.get(e)
    if isinstance(e, BinaryOp) and e.op in _OPS:
        a, b = index_values(e.a, env), index_values(e.b, env)
        if a is None or b is None:
            return None
        if e.op in ("div", "mod") and np.any(np.asarray(b) == 0):
            return None
        return _OPS[e.op](a, b)
    return None


def is_flat_view(task: Task) -> bool:
    """Whether `task`'s output is its input's elements in the same row-major order
    (memoized by the task's fingerprint)."""
    key = task.fingerprint()
    if key not in _VIEWS:
        _VIEWS[key] = _is_flat_view(task)
    return _VIEWS[key]


_VIEWS: dict[str, bool] = {}
CHUNK = 1 << 20  # output positions evaluated at once (memory: a few arrays of this many int64)


def _is_flat_view(task: Task) -> bool:
    if len(task.inputs) != 1 or len(task.outputs) != 1:
        return False
    inp, out = task.inputs[0], task.outputs[0]
    if out.definition is None or inp.dtype is not out.dtype:
        return False
    try:
        in_shape, out_shape = [int(s) for s in inp.shape], [int(s) for s in out.shape]
    except TypeError:
        return False
    n = int(np.prod(in_shape, dtype=np.int64))
    if n != int(np.prod(out_shape, dtype=np.int64)) or n == 0 or n > MAX_ELEMENTS:
        return False
    value = task.inlined_value(out)
    if not isinstance(value, TensorElement) or value.base is not inp or len(value.indices) != len(in_shape):
        return False
    axes = out.definition.axes
    for start in range(0, n, CHUNK):
        positions = np.arange(start, min(n, start + CHUNK), dtype=np.int64)
        grids = np.unravel_index(positions, out_shape) if out_shape else ()
        env = dict(zip(axes, (np.asarray(g, np.int64) for g in grids)))
        flat = np.zeros(len(positions), np.int64)
        for index, extent in zip(value.indices, in_shape):
            got = index_values(index, env)
            if got is None:
                return False
            got = np.broadcast_to(np.asarray(got, np.int64), flat.shape)
            if np.any(got < 0) or np.any(got >= extent):
                return False
            flat = flat * extent + got
        if not np.array_equal(flat, positions):
            return False
    return True


def view_tail(group: Any) -> list[int]:
    """Indices of `group`'s members after the anchor (group order) when every one of
    them is a view, in one chain from the anchor to the group's one output: the anchor's
    kernel then needs no graft. [] otherwise, or when disabled. (Views after a graft
    stay grafts: their stores are rewritten anyway.)"""
    if not group.views or len(group.outputs) != 1 or group.members_in("prologue"):
        return []
    tail = [j for j, _ in group.members_in("epilogue")]
    if not tail or len(tail) != len(group.members) - 1 or group.outputs[0] != (tail[-1], 0):
        return []
    previous = group.anchor
    for j in tail:
        member = group.members[j]
        if not is_flat_view(member.task) or [(s.kind, s.index) for s in member.sources] != [("member", previous)]:
            return []
        previous = j
    return tail


def _regroup(indices: tuple, old: list[int], new: list[int]) -> list[Expr]:
    """Indices into `new` of the element at `indices` of `old` (same size, row-major):
    dimensions matched in blocks of equal extent product, so a dimension kept whole
    keeps its index and only merged or split ones get arithmetic."""
    olds = [(i, e) for i, e in zip(indices, old) if e != 1]  # an extent-1 index is 0
    news = [d for d, e in enumerate(new) if e != 1]
    out: list[Expr] = [const(0)] * len(new)
    a = b = 0
    while a < len(olds):
        block_old, block_new = [olds[a]], [news[b]]
        po, pn = olds[a][1], new[news[b]]
        a, b = a + 1, b + 1
        while po != pn:
            if po < pn:
                block_old.append(olds[a])
                po *= olds[a][1]
                a += 1
            else:
                block_new.append(news[b])
                pn *= new[news[b]]
                b += 1
        flat = block_old[0][0]
        for i, e in block_old[1:]:
            flat = flat * e + i
        inner = pn
        for d in block_new:
            inner //= new[d]
            part = flat // inner if inner != 1 else flat
            out[d] = part % new[d] if d != block_new[0] else part
    return out


class _Retype(IRRewriter):
    def __init__(self, param: Var, new: Var, old_shape: list[int], new_shape: list[int]) -> None:
        self.param, self.new, self.old_shape, self.new_shape = param, new, old_shape, new_shape

    def _indices(self, indices: tuple) -> list[Expr]:
        if len(indices) != len(self.old_shape):
            raise FusionError(f"parameter {self.param.hint!r} is indexed with {len(indices)} indices")
        return _regroup(self.visit_seq(indices), self.old_shape, self.new_shape)

    def visit_Var(self, e: Var) -> Expr:
        if e is self.param:
            raise FusionError(f"the kernel uses {e.hint!r} other than through elements (a pointer, a call argument)")
        return e

    def visit_TensorElement(self, e: TensorElement) -> Expr:
        if e.base is self.param:
            return TensorElement(self.new, self._indices(e.indices))
        return super().visit_TensorElement(e)

    def visit_BufferStoreStmt(self, s: BufferStoreStmt):
        if s.base is self.param:
            return BufferStoreStmt(self.new, self._indices(s.indices), self.visit(s.value))
        return super().visit_BufferStoreStmt(s)


def rename_buffer(kernel: BoundKernel, key: Any, new_key: Any, shape: Any) -> None:
    """Every parameter bound to `key` becomes a parameter of `shape` (same dtype, same
    size) bound to `new_key`, its element accesses (stores, reads, addresses: vector
    accesses stay valid) regrouped to that shape."""
    sites = kernel.sites(key)
    if not sites:
        raise FusionError(f"no function of {kernel.name!r} uses the buffer {key}")
    new_shape = [int(s) for s in shape]
    for fname, param in sites:
        ptype = param.type
        old_shape = [int(s) for s in getattr(ptype, "shape", ())]
        if getattr(ptype, "layout", None) is not None or int(np.prod(old_shape)) != int(np.prod(new_shape)):
            raise FusionError(f"parameter {param.hint!r} of {fname!r} is not a row-major tensor of the view's size")
        new = tensor_param(param.hint, ptype.dtype, new_shape)
        body = _Retype(param, new, old_shape, new_shape).visit(kernel.functions[fname].body)
        kernel.update(fname, body, drop=param, add=[], replace_with=(new, new_key))
