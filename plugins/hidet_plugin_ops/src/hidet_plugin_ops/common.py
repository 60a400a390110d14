"""What every operator of this plugin shares: building the Operator from a Task,
checking attributes, index arithmetic, and calling math primitives by name.

Operators never import a backend: math functions go through the core's math
primitives (``hidet_framework.ir.math_functions``), which each backend spells for its
target, through `math_call`.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from hidet_framework.compute import InverseMap, Task, TensorNode, tensor_input
from hidet_framework.graph import Operator, ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Expr, TensorElement, cast, const, convert
from hidet_framework.ir.math_functions import math_primitive
from hidet_framework.ir.type_infer import infer_type


class OperatorAttributeError(ValueError):
    """An operator attribute is out of range or malformed (axis, permutation, pads...).
    Named so it does not shadow Python's AttributeError."""


def describe(t: Tensor) -> str:
    """``f32[3, 4]``: how error messages show a tensor."""
    return f"{t.dtype.short}{list(t.shape)}"


def require_tensor(op: str, value: Any, what: str = "input") -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(value).__name__} ({value!r})")
    return value


def inputs_for(tensors: Sequence[Tensor]) -> list[TensorNode]:
    """One task input per operator input, same shape and dtype."""
    return [tensor_input(f"x{k}", t.dtype, t.shape) for k, t in enumerate(tensors)]


def make_operator(name: str, inputs: Sequence[Tensor], task_inputs: Sequence[TensorNode],
                  outputs: Sequence[TensorNode], attributes: Mapping[str, Any] | None = None,
                  inverse_maps: Mapping[TensorNode, InverseMap] | None = None) -> tuple[Tensor, ...]:
    """Wrap compute definitions into a Task and an Operator; return its outputs."""
    attributes = dict(attributes or {})
    task = Task(name, task_inputs, outputs, attributes, dict(inverse_maps or {}))
    return Operator(name, inputs, task, attributes).outputs


def normalize_axis(op: str, axis: int, rank: int, what: str = "axis") -> int:
    """A possibly negative axis of a rank-`rank` tensor, as a non-negative one."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{op}: {what} must be an int, got {axis!r}")
    if not -rank <= axis < rank:
        raise OperatorAttributeError(f"{op}: {what} {axis} is out of range for a tensor of rank {rank} "
                                     f"(valid: {-rank}..{rank - 1})")
    return axis + rank if axis < 0 else axis


def normalize_axes(op: str, axes: Iterable[int], rank: int, what: str = "axes") -> list[int]:
    out = [normalize_axis(op, a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise OperatorAttributeError(f"{op}: {what} {list(axes)} repeat an axis")
    return out


def int_tuple(op: str, value: Any, count: int, what: str) -> tuple[int, ...]:
    """An int or a sequence of `count` ints, as a tuple of `count` ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * count
    values = tuple(value)
    if len(values) != count or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise OperatorAttributeError(f"{op}: {what} must be an int or {count} ints, got {value!r}")
    return values


# ------------------------------------------------------------------ index arithmetic

def load(t: TensorNode, indices: Sequence[Any]) -> Expr:
    """The element ``t[indices]`` (rank 0 included)."""
    return TensorElement(t, tuple(convert(i) for i in indices))


def ravel(indices: Sequence[Expr], shape: Sequence[int]) -> Expr:
    """Row-major flat position of `indices` in `shape` (skips multiplications by 1)."""
    flat: Expr | None = None
    for idx, extent in zip(indices, shape):
        if flat is None:
            flat = convert(idx)
        else:
            flat = flat * extent + idx if extent != 1 else flat + idx
    return flat if flat is not None else const(0)


def unravel(flat: Expr, shape: Sequence[int]) -> list[Expr]:
    """Row-major indices of flat position `flat` in `shape` (extent-1 dims are 0)."""
    out: list[Expr] = []
    for d, extent in enumerate(shape):
        if extent == 1:
            out.append(const(0))
            continue
        inner = 1
        for s in shape[d + 1:]:
            inner *= s
        e = flat // inner if inner != 1 else flat
        outer = 1
        for s in shape[:d]:
            outer *= s
        out.append(e % extent if outer != 1 else e)
    return out


# ------------------------------------------------------------------ math primitives

def math_call(name: str, x: Expr, *more: Expr) -> Expr:
    """``name(x, ...)`` through the core's math primitives (``exp_f32``...), which the
    backends spell for their targets. Integer arguments are computed in float32; the
    result has the float type of the first argument (float32 for integers)."""
    args = [convert(a) for a in (x, *more)]
    args = [a if infer_type(a).is_float() else cast(a, dtypes.float32) for a in args]
    call = math_primitive(name, *args)
    first = infer_type(args[0])
    return call if infer_type(call) is first else cast(call, first)


def as_dtype(x: Expr, dtype: DataType) -> Expr:
    """`x` converted to `dtype` (no node when it already is)."""
    return x if infer_type(x) is dtype else cast(x, dtype)


def fail_shape(op: str, message: str) -> ShapeError:
    return ShapeError(f"{op}: {message}")
