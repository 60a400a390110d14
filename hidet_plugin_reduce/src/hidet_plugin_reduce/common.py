"""What the operators of this plugin share: argument checks with clear errors, the
dtype used for arithmetic, and the "row form" attributes the templates read.

Row form: when the reduced axes of an input of shape ``S`` are one contiguous block
``S[a:b]``, the input is a 3-D array ``[outer, extent, inner]`` with
``outer = prod(S[:a])``, ``extent = prod(S[a:b])``, ``inner = prod(S[b:])``; every
operator records ``shape``, ``axes`` and these three numbers in its attributes, so a
template knows which element of the real (rank-N) tensor a row position is without
looking at the compute definition. Operators whose axes are not one block record
``contiguous = False`` and are left to the auto-scheduler.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Expr, cast, const, equal, logical_and, logical_or, not_equal
from hidet_framework.ir.math_functions import math_primitive
from hidet_framework.ir.type_infer import infer_type


class ReduceArgumentError(ShapeError):
    """A reduction or normalization got an argument that does not fit its input (an
    axis out of range or repeated, an epsilon that is not positive, a scale of the
    wrong shape...). A ShapeError, hence a ValueError."""


def describe(t: Tensor) -> str:
    """``f32[3, 4]``: how error messages show a tensor."""
    return f"{t.dtype.short}{list(t.shape)}"


def require_tensor(op: str, value: Any, what: str = "x") -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(value).__name__} ({value!r})")
    return value


def require_float(op: str, x: Tensor, what: str = "x") -> None:
    if not x.dtype.is_float():
        raise ReduceArgumentError(f"{op}: {what} must be a float tensor (float16, bfloat16, float32, float64), "
                                  f"got {describe(x)}")


def normalize_axis(op: str, axis: Any, x: Tensor, what: str = "axis") -> int:
    rank = x.rank
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{op}: {what} must be an int, got {axis!r}")
    if not -rank <= axis < rank:
        valid = f"{-rank}..{rank - 1}" if rank else "none: x is a scalar"
        raise ReduceArgumentError(f"{op}: {what}={axis} is out of range for x of shape {describe(x)} "
                                  f"(rank {rank}, valid {valid})")
    return axis + rank if axis < 0 else axis


def normalize_axes(op: str, axes: Any, x: Tensor) -> tuple[int, ...]:
    """`axes` (None: every axis; an int; a sequence) as sorted non-negative axes."""
    if axes is None:
        return tuple(range(x.rank))
    if isinstance(axes, int) and not isinstance(axes, bool):
        axes = (axes,)
    try:
        items = list(axes)
    except TypeError:
        raise TypeError(f"{op}: axes must be None, an int or a sequence of ints, got {axes!r}") from None
    out = [normalize_axis(op, a, x, "axes entry") for a in items]
    if len(set(out)) != len(out):
        raise ReduceArgumentError(f"{op}: axes={items} names an axis twice for x of shape {describe(x)} "
                                  f"(as non-negative axes: {out})")
    return tuple(sorted(out))


def check_epsilon(op: str, epsilon: Any, x: Tensor) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        raise TypeError(f"{op}: epsilon must be a number, got {epsilon!r}")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ReduceArgumentError(f"{op}: epsilon must be positive and finite, got {epsilon!r} "
                                  f"(x of shape {describe(x)})")
    return float(epsilon)


def check_parameter(op: str, what: str, p: Any, want: Sequence[int], x: Tensor, dtype_of: Tensor) -> Tensor:
    """A per-channel parameter (scale, bias, mean...) of exactly shape `want`."""
    p = require_tensor(op, p, what)
    if tuple(p.shape) != tuple(want):
        raise ReduceArgumentError(f"{op}: {what} has shape {describe(p)}, expected {list(want)} "
                                  f"for x of shape {describe(x)}")
    if not p.dtype.is_float():
        raise ReduceArgumentError(f"{op}: {what} must be a float tensor, got {describe(p)}")
    return p


# ------------------------------------------------------------------ arithmetic

def compute_dtype(dtype: DataType) -> DataType:
    """Arithmetic type of a float dtype: float64 stays, everything else is float32
    (float16/bfloat16 inputs accumulate in float32)."""
    return dtypes.float64 if dtype is dtypes.float64 else dtypes.float32


def widen(value: Expr, dtype: DataType) -> Expr:
    return value if infer_type(value) is dtype else cast(value, dtype)


def fconst(value: float, dtype: DataType) -> Expr:
    return const(value, dtype)


def math_call(name: str, *args: Expr) -> Expr:
    return math_primitive(name, *args)


# ------------------------------------------------------------------ row form

def prod(values: Iterable[int]) -> int:
    return int(math.prod(int(v) for v in values))


def row_form(shape: Sequence[int], axes: Sequence[int]) -> dict:
    """``{"shape", "axes", "contiguous", "outer", "extent", "inner"}`` for reducing
    `shape` over `axes` (sorted): see the module docstring."""
    shape, axes = tuple(int(s) for s in shape), tuple(int(a) for a in axes)
    form: dict = {"shape": shape, "axes": axes}
    contiguous = bool(axes) and list(axes) == list(range(axes[0], axes[-1] + 1))
    form["contiguous"] = contiguous
    if contiguous:
        a, b = axes[0], axes[-1] + 1
        form.update(outer=prod(shape[:a]), extent=prod(shape[a:b]), inner=prod(shape[b:]))
    return form


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in axes)


def input_index(out_index: Sequence[Expr], reduce_index: Sequence[Expr], rank: int, axes: Sequence[int],
                keepdims: bool) -> tuple:
    """The input index of output position `out_index` and reduction position
    `reduce_index` (one per reduced axis)."""
    out_iter, red_iter = iter(out_index), iter(reduce_index)
    idx = []
    for d in range(rank):
        if d in axes:
            if keepdims:
                next(out_iter)
            idx.append(next(red_iter))
        else:
            idx.append(next(out_iter))
    return tuple(idx)


def arg_wins(v: Expr, best: Expr, is_max: bool, last: bool, is_float: bool) -> Expr:
    """Whether `v`, met after `best` in an argmax (argmin) scan, takes its place: larger
    (smaller), or equal with `last` (select_last_index). As numpy's argmax, a NaN is the
    extreme: the first NaN's position (the last one's with `last`) is the result."""
    wins = (v >= best if last else v > best) if is_max else (v <= best if last else v < best)
    if not is_float:
        return wins
    if last:
        return logical_or(wins, not_equal(v, v))
    return logical_or(wins, logical_and(not_equal(v, v), equal(best, best)))


def arg_matches(v: Expr, best: Expr, is_float: bool) -> Expr:
    """`v` is the extreme `best` of its row (argmax's second stage): equal, or both NaN."""
    return logical_or(equal(v, best), not_equal(v, v)) if is_float else equal(v, best)
