"""The rule-based auto-scheduler: a correct kernel for every Task, on every target.

Rules: injective intermediates are inlined into their consumers; every stage (an
output, or an intermediate holding a reduction) gets one kernel; intermediates live in
a workspace; each output element is computed by one worker, reductions as loops inside
it. How elements map to workers is the target's business: the backend builds each
stage's kernel (``Backend.auto_schedule_kernel(StageKernel)``; the CPU plugin puts
threads over the leading dimensions, the CUDA plugin one thread per element), so this
module names no target. Templates replace this where speed matters.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import attrs

from hidet_framework.compute.definitions import ComputeRewriter, ReduceCompute, TensorNode, tensors_read
from hidet_framework.compute.task import Task
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Expr, const, maximum, minimum, var
from hidet_framework.ir.func import Function, module
from hidet_framework.ir.type_infer import cast_if_needed
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive
from hidet_framework.ir.stmt import AssignStmt, BufferStoreStmt, DeclareStmt, ForStmt, LetStmt, Stmt, seq
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec

# GPU worker indices. Declared here without a spelling: a GPU backend plugin gives
# them one (CUDA: ``threadIdx.x``) by registering the same names for its target kind.
thread_idx_x = register_primitive(PrimitiveFunction("threadIdx_x", "int32", bounds=(0, 1024)))
block_idx_x = register_primitive(PrimitiveFunction("blockIdx_x", "int32", bounds=(0, 2**31 - 1)))


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
    # the value first: the CPU helper tests its first operand for NaN, off the chain
    return maximum(value, acc) if kind == "max" else minimum(value, acc)


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

@attrs.frozen
class StageKernel:
    """One stage's kernel to build, handed to a backend's ``auto_schedule_kernel``:
    the function `name`, its `params` (the tensors read, then `output`), the `value`
    of one output element (a compute expression over the output's axes, reductions
    included) and the output's static `shape`. The methods are the target-neutral
    pieces every loop structure needs; the backend decides the loops and the workers.
    """

    name: str
    params: list
    output: TensorNode
    value: Expr
    shape: tuple

    @property
    def axes(self) -> tuple:
        """The output's axis variables, outermost first."""
        return self.output.definition.axes

    def store(self, indices: Sequence[Expr]) -> Stmt:
        """Compute the element at `indices` (reductions as loops before it) and store it."""
        return _store_element(self.output, list(indices), self.value)

    def bind_axes(self, indices: Sequence[Expr], body: Stmt) -> Stmt:
        """`body` with the output's axes bound to `indices`."""
        return _bind_axes(self.axes, list(indices), body)

    def index_dtype(self, total: int) -> DataType:
        """int32 when `total` positions fit in it, else int64."""
        return _index_dtype(total)

    @staticmethod
    def unravel(flat: Expr, shape: Sequence[int]) -> list[Expr]:
        """Row-major indices of a flat position (outermost first)."""
        return _unravel(flat, tuple(shape))


class SerialKernels:
    """The reference schedule: one serial loop per output dimension, host functions.
    The IR evaluator runs it (``hf.compile(..., target="evaluator")`` and constant
    folding without a compiler); it needs no backend plugin."""

    def auto_schedule_kernel(self, stage: StageKernel) -> Function:
        itype = stage.index_dtype(math.prod(stage.shape))
        indices = [var(f"i{k}", itype) for k in range(len(stage.shape))]
        body = stage.bind_axes(indices, stage.store(list(stage.axes)))
        for index, extent in reversed(list(zip(indices, stage.shape))):
            body = ForStmt(index, const(extent, itype), body)
        return Function(stage.name, list(stage.params), body, kind="cpu_kernel")


def auto_schedule(task: Task, kernels: Any) -> ScheduledTask:
    """One kernel per stage of `task`, each built by ``kernels.auto_schedule_kernel``
    (`kernels`: a backend, or `SerialKernels`). A target-kind string (``"cpu"``) stands
    for the backend the plugin host has for that kind."""
    if isinstance(kernels, str):
        from hidet_framework.extension import plugin_host

        kernels = plugin_host().backend_for(kernels)
    build = getattr(kernels, "auto_schedule_kernel", None)
    if not callable(build):
        raise SchedulingError(f"{kernels!r} cannot build auto-scheduled kernels (no auto_schedule_kernel method)")
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
        functions.append(build(StageKernel(fname, params, stage, value, shape)))
        launches.append(Launch(fname, tuple(refs[id(t)] for t in params)))
    return ScheduledTask(module(task.name, functions), tuple(launches), tuple(workspace), source="auto")
