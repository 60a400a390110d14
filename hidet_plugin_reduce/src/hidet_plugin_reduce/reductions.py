"""Reductions over a set of axes (``reduce_sum`` ... ``reduce_sum_square``), the index
of the largest/smallest element along one axis (``argmax``/``argmin``), and the
running sum along one axis (``cumsum``).

Semantics follow numpy (``np.sum(x, axis=axes, keepdims=keepdims)``) with ONNX's
extras: ``axes=None`` reduces every axis, ``axes=()`` reduces none (the output is the
per-element transform: ``x``, ``x*x`` or ``|x|``, as ONNX's noop_with_empty_axes).
float16/bfloat16 inputs are accumulated in float32 and rounded once; the output
keeps the input dtype (argmax/argmin give int64).
"""
from __future__ import annotations

from typing import Any, Callable

from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.graph import Operator, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Expr, cast, const, if_then_else

from .common import (
    ReduceArgumentError, arg_matches, compute_dtype, describe, input_index, math_call, normalize_axes, normalize_axis,
    reduced_shape, require_tensor, row_form, widen,
)

# kind -> (core reduction, per-element transform, finish, needs a float input)
_KINDS: dict[str, tuple[str, Callable[[Expr], Expr], Callable[[Expr], Expr], bool]] = {
    "sum": ("sum", lambda v: v, lambda a: a, False),
    "mean": ("mean", lambda v: v, lambda a: a, True),
    "max": ("max", lambda v: v, lambda a: a, False),
    "min": ("min", lambda v: v, lambda a: a, False),
    "prod": ("prod", lambda v: v, lambda a: a, False),
    "sum_square": ("sum", lambda v: v * v, lambda a: a, False),
    "l2": ("sum", lambda v: v * v, lambda a: math_call("sqrt", a), True),
}


def _arith_dtype(x: Tensor):
    """The dtype the reduction computes in: float32 for half floats (and float32),
    float64 for float64, the input's own integer type otherwise."""
    return compute_dtype(x.dtype) if x.dtype.is_float() else x.dtype


def _check_input(op: str, x: Any, float_only: bool, bool_ok: bool = False) -> Tensor:
    x = require_tensor(op, x)
    if (x.dtype.is_bool() and not bool_ok) or (float_only and not x.dtype.is_float()):
        want = "a float tensor" if float_only else "a numeric (non-bool) tensor"
        raise ReduceArgumentError(f"{op}: x must be {want}, got {describe(x)}")
    return x


def _reduce(kind: str, x: Tensor, axes: Any, keepdims: bool) -> Tensor:
    op = f"reduce_{kind}"
    core, transform, finish, float_only = _KINDS[kind]
    # max/min of bools are any/all (ONNX allows them), computed in int32
    x = _check_input(op, x, float_only, bool_ok=core in ("max", "min"))
    if not isinstance(keepdims, (bool, int)):
        raise TypeError(f"{op}: keepdims must be a bool, got {keepdims!r}")
    keepdims = bool(keepdims)
    axes = normalize_axes(op, axes, x)
    # an empty reduction gives the identity: 0, 1, -inf / the type's lowest for max (ONNX)
    acc = dtypes.int32 if x.dtype.is_bool() else _arith_dtype(x)
    if x.dtype.is_bool():  # any / all: the int32 max/min (identity -2**31 / 2**31-1) is positive
        finish = lambda a: a > 0  # noqa: E731
    xin = tensor_input("x", x.dtype, x.shape)
    red_shape = [x.shape[a] for a in axes]
    out_shape = reduced_shape(x.shape, axes, keepdims)

    def body(*out_idx):
        value = reduce(red_shape, lambda *r: transform(widen(xin[input_index(out_idx, r, x.rank, axes, keepdims)], acc)),
                       core, acc)
        return finish(value)

    if axes:
        y = compute("y", out_shape, body, dtype=x.dtype)
    else:  # nothing reduced: the per-element transform
        y = compute("y", out_shape, lambda *i: finish(transform(widen(xin[i], acc))), dtype=x.dtype)
    attributes = {"kind": kind, "keepdims": keepdims, **row_form(x.shape, axes)}
    task = Task(op, [xin], [y], attributes)
    return Operator(op, [x], task, attributes).outputs[0]


def reduce_sum(x: Tensor, axes: Any = None, keepdims: bool = False) -> Tensor:
    """``sum(x)`` over `axes` (None: all; an int or a sequence, negative allowed)."""
    return _reduce("sum", x, axes, keepdims)


def reduce_mean(x: Tensor, axes: Any = None, keepdims: bool = False) -> Tensor:
    """``mean(x)`` over `axes` (float inputs)."""
    return _reduce("mean", x, axes, keepdims)


def reduce_max(x: Tensor, axes: Any = None, keepdims: bool = False) -> Tensor:
    return _reduce("max", x, axes, keepdims)


def reduce_min(x: Tensor, axes: Any = None, keepdims: bool = False) -> Tensor:
    return _reduce("min", x, axes, keepdims)


def reduce_prod(x: Tensor, axes: Any = None, keepdims: bool = False) -> Tensor:
    return _reduce("prod", x, axes, keepdims)


def reduce_l2(x: Tensor, axes: Any = None, keepdims: bool = False) -> Tensor:
    """``sqrt(sum(x * x))`` over `axes` (float inputs)."""
    return _reduce("l2", x, axes, keepdims)


def reduce_sum_square(x: Tensor, axes: Any = None, keepdims: bool = False) -> Tensor:
    """``sum(x * x)`` over `axes`."""
    return _reduce("sum_square", x, axes, keepdims)


# ------------------------------------------------------------------ argmax / argmin

def _arg(kind: str, x: Tensor, axis: int, keepdims: bool, select_last_index: bool) -> Tensor:
    op = f"arg{kind}"
    x = _check_input(op, x, False)
    axis = normalize_axis(op, axis, x)
    extent = x.shape[axis]
    if extent == 0:
        raise ReduceArgumentError(f"{op}: axis {axis} of x {describe(x)} is empty")
    keepdims = bool(keepdims)
    acc = _arith_dtype(x)
    xin = tensor_input("x", x.dtype, x.shape)
    out_shape = reduced_shape(x.shape, (axis,), keepdims)

    def at(out_idx, r):
        return widen(xin[input_index(out_idx, (r,), x.rank, (axis,), keepdims)], acc)

    # stage 1: the extreme value; stage 2: the first (or last) position holding it
    best = compute("best", out_shape, lambda *o: reduce([extent], lambda r: at(o, r), kind, acc))

    def position(*o):   # a NaN is the extreme (best is NaN then), as numpy's argmax
        def match(r):
            return arg_matches(at(o, r), best[o], acc.is_float())
        if select_last_index:
            return reduce([extent], lambda r: if_then_else(match(r), r, const(-1, "int32")), "max", "int32")
        return reduce([extent], lambda r: if_then_else(match(r), r, const(extent, "int32")), "min", "int32")

    y = compute("y", out_shape, lambda *o: cast(position(*o), dtypes.int64), dtype=dtypes.int64)
    attributes = {"kind": op, "keepdims": keepdims, "select_last_index": bool(select_last_index),
                  **row_form(x.shape, (axis,))}
    task = Task(op, [xin], [y], attributes)
    return Operator(op, [x], task, attributes).outputs[0]


def argmax(x: Tensor, axis: int = 0, keepdims: bool = False, select_last_index: bool = False) -> Tensor:
    """int64 position of the largest element along `axis` (the first one on ties, or the
    last with `select_last_index`)."""
    return _arg("max", x, axis, keepdims, select_last_index)


def argmin(x: Tensor, axis: int = 0, keepdims: bool = False, select_last_index: bool = False) -> Tensor:
    return _arg("min", x, axis, keepdims, select_last_index)


# ------------------------------------------------------------------ cumsum

def cumsum(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Running sum along `axis` (ONNX CumSum: `exclusive` leaves out the element
    itself, `reverse` sums from the end)."""
    op = "cumsum"
    x = _check_input(op, x, False)
    axis = normalize_axis(op, axis, x)
    n = x.shape[axis]
    acc = _arith_dtype(x)
    xin = tensor_input("x", x.dtype, x.shape)

    def at(idx, position):
        full = list(idx)
        full[axis] = position
        return widen(xin[tuple(full)], acc)

    def body(*idx):
        j = idx[axis]
        if not reverse:
            count, first = (j, const(0, "int32")) if exclusive else (j + 1, const(0, "int32"))
        else:
            count, first = (n - 1 - j, j + 1) if exclusive else (n - j, j)
        return reduce([count], lambda r: at(idx, first + r), "sum", acc)

    y = compute("y", x.shape, body, dtype=x.dtype)
    attributes = {"kind": op, "exclusive": bool(exclusive), "reverse": bool(reverse), **row_form(x.shape, (axis,))}
    task = Task(op, [xin], [y], attributes)
    return Operator(op, [x], task, attributes).outputs[0]


OPERATORS = {
    "reduce_sum": reduce_sum, "reduce_mean": reduce_mean, "reduce_max": reduce_max, "reduce_min": reduce_min,
    "reduce_prod": reduce_prod, "reduce_l2": reduce_l2, "reduce_sum_square": reduce_sum_square,
    "argmax": argmax, "argmin": argmin, "cumsum": cumsum,
}
