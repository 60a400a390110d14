"""The rule-based auto-scheduler: a correct kernel for every Task, on cpu and cuda.

Rules: injective intermediates are inlined into their consumers; every stage (an
output, or an intermediate holding a reduction) gets one kernel; intermediates live in
a workspace; each output element is computed by one worker, reductions as loops inside
it. CPU: OpenMP threads over the leading dimensions, a serial innermost loop the C
compiler vectorises. CUDA: one thread per element, 256-thread blocks.
Templates replace this where speed matters.
"""
from __future__ import annotations

import math
from typing import Callable

from hidet_framework.compute.definitions import ComputeRewriter, ReduceCompute, TensorNode, tensors_read
from hidet_framework.compute.task import Task
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Expr, Var, cast, const, maximum, minimum, var
from hidet_framework.ir.func import Function, module
from hidet_framework.ir.type_infer import cast_if_needed
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive
from hidet_framework.ir.stmt import (
    AssignStmt, BufferStoreStmt, DeclareStmt, ForStmt, IfStmt, LetStmt, Stmt, seq,
)
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec

# GPU worker indices. Declared here without a spelling: a GPU backend plugin gives
# them one (CUDA: ``threadIdx.x``) by registering the same names for its target kind.
thread_idx_x = register_primitive(PrimitiveFunction("threadIdx_x", "int32", bounds=(0, 1024)))
block_idx_x = register_primitive(PrimitiveFunction("blockIdx_x", "int32", bounds=(0, 2**31 - 1)))

CUDA_BLOCK = 256


class SchedulingError(NotImplementedError):
    pass


def _static_shape(t: TensorNode, task: Task) -> tuple[int, ...]:
    if any(isinstance(s, Expr) for s in t.shape):
        raise SchedulingError(f"task {task.name!r}: tensor {t.name!r} has a symbolic shape; "
                              "the auto-scheduler needs static shapes")
    return tuple(int(s) for s in t.shape)


def _index_dtype(total: int) -> DataType:
    return dtypes.int32 if total < 2**31 else dtypes.int64


def _unravel(flat: Expr, shape: tuple[int, ...]) -> list[Expr]:
    """Row-major indices of a flat position (outermost first)."""
    out: list[Expr] = []
    for d in range(len(shape)):
        inner = math.prod(shape[d + 1:])
        e = flat // inner if inner != 1 else flat
        out.append(e % shape[d] if d > 0 else e)
    return out


# ----------------------------------------------------------------- reductions

def _init_value(kind: str, dtype: DataType) -> Expr:
    if kind in ("sum", "mean"):
        return const(0, dtype)
    if kind == "prod":
        return const(1, dtype)
    return const(dtype.min_value() if kind == "max" else dtype.max_value(), dtype)


def _combine(kind: str, acc: Expr, value: Expr) -> Expr:
    if kind in ("sum", "mean"):
        return acc + value
    if kind == "prod":
        return acc * value
    return maximum(acc, value) if kind == "max" else minimum(acc, value)


class _HoistReductions(ComputeRewriter):
    """Replace each reduction by an accumulator variable, collecting the statements
    that compute it (to be placed before the statement that uses the value)."""

    def __init__(self) -> None:
        self.stmts: list[Stmt] = []

    def visit_ReduceCompute(self, e: ReduceCompute) -> Expr:
        acc = var("acc", e.acc_dtype)
        inner = _HoistReductions()
        value = inner.visit(e.value)
        body = seq(*inner.stmts, AssignStmt(acc, _combine(e.kind, acc, cast_if_needed(value, e.acc_dtype))))
        for axis, extent in reversed(list(zip(e.axes, e.extents))):
            body = ForStmt(axis, extent, body)
        self.stmts += [DeclareStmt(acc, _init_value(e.kind, e.acc_dtype)), body]
        if e.kind == "mean":
            count = math.prod(int(x) for x in e.extents)
            return acc / const(count, e.acc_dtype)
        return acc


def _store_element(out: TensorNode, indices: list[Expr], value: Expr) -> Stmt:
    hoist = _HoistReductions()
    value = hoist.visit(value)
    store = BufferStoreStmt(out, tuple(indices), cast_if_needed(value, out.dtype))
    return seq(*hoist.stmts, store)


def _bind_axes(axes: tuple, indices: list[Expr], body: Stmt) -> Stmt:
    for axis, idx in reversed(list(zip(axes, indices))):
        body = LetStmt(axis, idx, body)
    return body


# ----------------------------------------------------------------- kernels

def _cpu_kernel(name: str, params: list[Var], out: TensorNode, value: Expr, shape: tuple[int, ...]) -> Function:
    """Threads over the leading dimensions (all of a 1-D output), a serial innermost
    loop over the last one."""
    axes = out.definition.axes
    element = _store_element(out, list(axes), value)
    if not shape:
        return Function(name, params, element, kind="cpu_kernel")
    total = math.prod(shape)
    itype = _index_dtype(total)
    j = var("j", itype)
    if len(shape) == 1:
        body = ForStmt(j, const(shape[0], itype), _bind_axes(axes, [j], element), parallel=True)
        return Function(name, params, body, kind="cpu_kernel")
    p = var("p", itype)
    inner = ForStmt(j, const(shape[-1], itype), _bind_axes(axes, _unravel(p, shape[:-1]) + [j], element))
    body = ForStmt(p, const(total // shape[-1], itype), inner, parallel=True)
    return Function(name, params, body, kind="cpu_kernel")


def _cuda_kernel(name: str, params: list[Var], out: TensorNode, value: Expr, shape: tuple[int, ...]) -> Function:
    total = math.prod(shape)
    itype = _index_dtype(total)
    w = var("w", itype)
    flat = cast(block_idx_x(), itype) * CUDA_BLOCK + cast(thread_idx_x(), itype)
    axes = out.definition.axes
    body = _bind_axes(axes, _unravel(w, shape), _store_element(out, list(axes), value))
    body = LetStmt(w, flat, IfStmt(w < const(total, itype), body))
    grid = (max(1, (total + CUDA_BLOCK - 1) // CUDA_BLOCK),)
    return Function(name, params, body, kind="cuda_kernel",
                    attrs={"grid_dim": grid, "block_dim": (CUDA_BLOCK,)})


_KERNEL_BUILDERS: dict[str, Callable[..., Function]] = {"cpu": _cpu_kernel, "cuda": _cuda_kernel}


def auto_schedule(task: Task, target_kind: str) -> ScheduledTask:
    """One kernel per stage of `task` for `target_kind` (``cpu`` or ``cuda``)."""
    if target_kind not in _KERNEL_BUILDERS:
        raise SchedulingError(f"the auto-scheduler knows targets {sorted(_KERNEL_BUILDERS)}, not {target_kind!r}")
    build = _KERNEL_BUILDERS[target_kind]
    refs: dict[int, BufferRef] = {}
    for k, t in enumerate(task.inputs):
        refs[id(t)] = BufferRef("input", k)
    for k, t in enumerate(task.outputs):
        refs[id(t)] = BufferRef("output", k)
    workspace: list[WorkspaceSpec] = []
    functions: list[Function] = []
    launches: list[Launch] = []
    for stage in task.stages():
        shape = _static_shape(stage, task)
        if id(stage) not in refs:
            refs[id(stage)] = BufferRef("workspace", len(workspace))
            workspace.append(WorkspaceSpec(stage.name, stage.dtype, shape))
        value = task.inlined_value(stage)
        reads = [t for t in tensors_read(value) if t is not stage]
        for t in reads:
            _static_shape(t, task)
        params = reads + [stage]
        fname = f"{task.name}_{stage.name}_{len(functions)}"
        functions.append(build(fname, params, stage, value, shape))
        launches.append(Launch(fname, tuple(refs[id(t)] for t in params)))
    return ScheduledTask(module(task.name, functions), tuple(launches), tuple(workspace), source="auto")
