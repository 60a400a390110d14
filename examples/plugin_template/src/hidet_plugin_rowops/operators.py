"""The plugin's operators. An operator is a plain function: it takes graph `Tensor`s
(attributes as keyword arguments), writes its math once as compute definitions over
placeholder tensors, and returns the outputs of an `Operator` built from that `Task`.
The same Task serves every target: templates and the auto-scheduler schedule it."""
from __future__ import annotations

from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.graph import Operator, ShapeError, Tensor

ROWSUM = "rowops.rowsum"
SCALE = "rowops.scale"


def rowsum(x: Tensor) -> Tensor:
    """``y[i] = sum_k x[i, k]`` for a 2-D `x`."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{ROWSUM}: expected a Tensor, got {type(x).__name__}")
    if x.rank != 2:
        raise ShapeError(f"{ROWSUM}: expected a 2-D tensor, got shape {list(x.shape)}")
    rows, cols = x.shape
    a = tensor_input("x", x.dtype, x.shape)
    y = compute("y", [rows], lambda i: reduce([cols], lambda k: a[i, k], "sum"))
    # The Task's name becomes part of C function names: no dot in it.
    return Operator(ROWSUM, [x], Task("rowops_rowsum", [a], [y])).outputs[0]


def scale(x: Tensor, factor: float) -> Tensor:
    """``y = x * factor`` elementwise; `factor` is an attribute (a Python number)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{SCALE}: expected a Tensor, got {type(x).__name__}")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise TypeError(f"{SCALE}: factor must be a number, got {factor!r}")
    factor = float(factor)
    a = tensor_input("x", x.dtype, x.shape)
    y = compute("y", x.shape, lambda *i: a[i] * factor)
    task = Task("rowops_scale", [a], [y], attributes={"factor": factor})
    return Operator(SCALE, [x], task, {"factor": factor}).outputs[0]
