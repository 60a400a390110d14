"""The values the IR evaluator works on: tensors (`Buffer`), pointers into them,
tensor slices, scalars of a dtype (`_scalar`) and the binary operators on them; its
error and the exceptions that carry ``break``, ``continue`` and ``return``.
Re-exported by ``hidet_framework.analysis.evaluator``."""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import convert
from hidet_framework.ir.types import TensorType
from hidet_framework.mapping.layout import DenseLayout, layout_of

_UNKNOWN = object()


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class EvaluationError(RuntimeError):
    pass


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class Buffer:
    """A tensor value: a flat numpy array read through a tensor type's layout."""

    def __init__(self, flat: np.ndarray, ttype: TensorType | None) -> None:
        self.flat = flat
        self.ttype = ttype
        self._strides: Any = _UNKNOWN  # a dense layout's int strides, None for other layouts

    def int_offset(self, ev: Any, indices: list[int]) -> int:
        """``offset(ev, indices)`` for indices that are Python ints: with a dense layout of
        int shape, the sum of index times stride, what ``DenseLayout._offset`` folds to."""
        strides = self._strides
        if strides is _UNKNOWN:
            strides = self._strides = _dense_strides(self.ttype)
        if strides is None or len(indices) != len(strides):
            return self.offset(ev, indices)
        out = sum(map(operator.mul, indices, strides))
        if _INT64_MIN <= out <= _INT64_MAX:
            return out
        return int(ev.eval_expr(convert(out)))

    def offset(self, ev: Any, indices: list[int]) -> int:
        if self.ttype is None:  # a pointer: one flat index
            if len(indices) != 1:
                raise EvaluationError(f"a pointer takes one index, got {len(indices)}")
            return indices[0]
        if len(indices) == 1 and self.ttype.rank != 1:
            return indices[0]  # a flattened access: the element offset (lowering/flatten_tensor_index)
        layout = layout_of(self.ttype)
        layout._check_rank(indices)
        out = layout._offset(tuple(indices))  # what layout(*indices) folds: an int for int shapes
        if type(out) is int and _INT64_MIN <= out <= _INT64_MAX:
            return out  # = evaluating convert(out): an int32 or int64 constant holding it unchanged
        return int(ev.eval_expr(convert(out)))


class PointerValue(Buffer):
    """A pointer into a buffer at an element offset."""

    def __init__(self, target: Buffer, base: int) -> None:
        super().__init__(target.flat, None)
        self.base = base

    def offset(self, ev: Any, indices: list[int]) -> int:
        return self.base + super().offset(ev, indices)


class SliceValue:
    """A tensor slice: fixed dimensions and start offsets over a base tensor value."""

    def __init__(self, base: Any, fixed: list, starts: list) -> None:
        self.base, self.fixed, self.starts = base, fixed, starts

    def full_indices(self, indices: list[int]) -> list[int]:
        it = iter(indices)
        return [f if f is not None else next(it) + s for f, s in zip(self.fixed, self.starts)]


def _wrap_int(value: int, dtype: DataType) -> int:
    if dtype.kind == "bool":
        return bool(value)
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.kind == "int" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


# Constant node -> its value (nodes are immutable and hash by identity; an entry keeps
# its node alive, so an id is never reused while cached; cleared when full).
_CONSTANTS: dict = {}
_CONSTANTS_LIMIT = 1 << 16
_FLOAT_SCALARS: dict[str, Callable[[Any], Any]] = {}  # float dtype name -> numpy scalar type (bfloat16: float32)


def _scalar(value: Any, dtype: DataType) -> Any:
    kind = dtype.kind
    if kind == "float":
        make = _FLOAT_SCALARS.get(dtype.name)
        if make is None:
            make = _FLOAT_SCALARS[dtype.name] = np.dtype("float32" if dtype.name == "bfloat16" else dtype.name).type
        return make(value)
    if kind == "bool":
        return bool(value)
    return _wrap_int(int(value), dtype)


def _c_div(a: Any, b: Any) -> Any:
    if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
        if b == 0:
            raise EvaluationError("integer division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _c_mod(a: Any, b: Any) -> Any:
    if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
        return a - _c_div(a, b) * b
    return np.fmod(a, b)


def _max(a: Any, b: Any) -> Any:
    """The IR's ``max(a, b)``, numpy's ``maximum``: a NaN operand is the result (`a` when
    both are), a tie (-0.0 and 0.0) gives `b`; the C / CUDA helpers compute the same."""
    return a if a != a or a > b else b


def _min(a: Any, b: Any) -> Any:
    """The IR's ``min(a, b)``, numpy's ``minimum`` (as `_max`)."""
    return a if a != a or a < b else b


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": _c_div, "mod": _c_mod, "min": _min, "max": _max,
    "bit_and": lambda a, b: a & b, "bit_or": lambda a, b: a | b, "bit_xor": lambda a, b: a ^ b,
    "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
}


def scalar_of(t: Any) -> Callable[[Any], Any]:
    """``lambda v: _scalar(v, t)`` with what depends on `t` alone worked out once."""
    if isinstance(t, DataType):
        kind = t.kind
        if kind == "float":
            try:
                return np.dtype("float32" if t.name == "bfloat16" else t.name).type
            except TypeError:
                pass
        elif kind == "bool":
            return bool
        else:
            mask, signed, half, full = (1 << t.bits) - 1, kind == "int", 1 << (t.bits - 1), 1 << t.bits

            def wrap(v: Any) -> int:
                v = int(v) & mask
                return v - full if signed and v >= half else v
            return wrap
    return lambda v: _scalar(v, t)


def typed_converter(t: Any) -> Callable[[Any], Any] | None:
    """What ``eval_typed`` applies for type `t`: its scalar converter, none for tensors."""
    return scalar_of(t) if isinstance(t, DataType) else None


def _dense_strides(ttype: TensorType | None) -> tuple | None:
    if ttype is not None:
        layout = layout_of(ttype)
        if type(layout) is DenseLayout and all(type(s) is int for s in layout.shape):
            return layout.strides()
    return None
