"""Elementwise operators of several operands, with numpy broadcasting and weak Python
scalars: arithmetic, comparisons, logic, where, clip."""
from __future__ import annotations

from typing import Any

import numpy as np

from hidet_framework.graph import Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import (
    BinaryOp, Expr, const, equal, if_then_else, logical_and as and_, logical_not as not_,
    logical_or as or_, maximum as max_, minimum as min_, not_equal,
)
from hidet_framework.ir.type_infer import infer_type

from .common import OperatorAttributeError, as_dtype, math_call
from .elementwise import elementwise, python_scalar, result_dtype, scalar_constant, weak_scalars_dtype

Operand = Any


def _arith(name: str, a: Operand, b: Operand, fn) -> Tensor:
    dtype = result_dtype(name, [a, b])
    return elementwise(name, [a, b], fn, operand_dtype=dtype, out_dtype=dtype)


def add(a: Operand, b: Operand) -> Tensor:
    return _arith("add", a, b, lambda x, y: x + y)


def sub(a: Operand, b: Operand) -> Tensor:
    return _arith("sub", a, b, lambda x, y: x - y)


def mul(a: Operand, b: Operand) -> Tensor:
    return _arith("mul", a, b, lambda x, y: x * y)


def maximum(a: Operand, b: Operand) -> Tensor:
    """numpy's ``maximum``: a NaN on either side is the result; -0.0 against 0.0 gives `b`."""
    return _arith("maximum", a, b, max_)


def minimum(a: Operand, b: Operand) -> Tensor:
    """numpy's ``minimum``: a NaN on either side is the result; -0.0 against 0.0 gives `b`."""
    return _arith("minimum", a, b, min_)


def _floor_div_int(x: Expr, y: Expr) -> Expr:
    # C division truncates; floor differs when the remainder is non-zero and the
    # signs differ.
    q = BinaryOp("div", x, y)
    r = BinaryOp("mod", x, y)
    zero = const(0, infer_type(x))
    adjust = and_(not_equal(r, zero), not_equal(BinaryOp("lt", r, zero), BinaryOp("lt", y, zero)))
    return if_then_else(adjust, q - const(1, infer_type(q)), q)


def div(a: Operand, b: Operand, rounding_mode: str | None = None) -> Tensor:
    """``a / b``. Without `rounding_mode` it is true division (integers give float32,
    like ``np.true_divide`` with the framework's default float); ``"trunc"`` rounds
    toward zero (C / ONNX integer Div), ``"floor"`` toward -inf (``np.floor_divide``)."""
    dtype = result_dtype("div", [a, b])
    attributes = {"rounding_mode": rounding_mode}
    if rounding_mode is None:
        out = dtype if dtype.is_float() else dtypes.float32
        return elementwise("div", [a, b], lambda x, y: x / y, operand_dtype=out, out_dtype=out,
                           attributes=attributes)
    if rounding_mode not in ("trunc", "floor"):
        raise OperatorAttributeError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    if dtype.is_float():
        def fn(x: Expr, y: Expr) -> Expr:
            return math_call("floor", x / y) if rounding_mode == "floor" else _trunc_float(x / y)
    elif rounding_mode == "trunc":
        def fn(x: Expr, y: Expr) -> Expr:
            return BinaryOp("div", x, y)
    else:
        fn = _floor_div_int
    return elementwise("div", [a, b], fn, operand_dtype=dtype, out_dtype=dtype, attributes=attributes)


def _trunc_float(v: Expr) -> Expr:
    # trunc(v) = floor(|v|) with v's sign; floor and ceil are the primitives backends give.
    zero = const(0, infer_type(v))
    return if_then_else(BinaryOp("lt", v, zero), math_call("ceil", v), math_call("floor", v))


_SMALL_POWERS = {2: lambda x: x * x, 3: lambda x: x * x * x, 4: lambda x: (x * x) * (x * x)}


def _small_integer_exponent(a: Operand, b: Operand) -> int | None:
    """2, 3 or 4 when `b` is that constant (a Python number or a 0-d constant tensor,
    as ONNX exports write ``Pow(x, 3.0)`` in GELU's tanh form) and `a` a tensor."""
    if not isinstance(a, Tensor):
        return None
    if isinstance(b, Tensor):
        if b.shape != () or not b.is_constant() or b.storage is None:
            return None
        b = np.asarray(b.storage).item()
    if isinstance(b, bool) or not isinstance(b, (int, float)):
        return None
    return int(b) if b in _SMALL_POWERS else None


def pow(a: Operand, b: Operand) -> Tensor:  # noqa: A001 - the operator's name is pow
    """``a ** b`` for floats (integers give float32, computed with the float primitive).
    A constant exponent of 2, 3 or 4 is computed by multiplications (``x * x * x``:
    within 2 ULP of the exact power, IEEE infinities and NaN alike; a vectorized
    ``powf`` cost 14% of GPT-2's CPU time)."""
    dtype = result_dtype("pow", [a, b])
    out = dtype if dtype.is_float() else dtypes.float32
    small = _small_integer_exponent(a, b)
    if small is not None:
        return elementwise("pow", [a], _SMALL_POWERS[small], operand_dtype=out, out_dtype=out,
                           attributes={"exponent": small})
    return elementwise("pow", [a, b], lambda x, y: math_call("pow", x, y), operand_dtype=out, out_dtype=out)


# ------------------------------------------------------------------ comparisons

def _compare(name: str, a: Operand, b: Operand, fn) -> Tensor:
    dtype = result_dtype(name, [a, b])
    return elementwise(name, [a, b], fn, operand_dtype=dtype, out_dtype=dtypes.boolean)


def equal_(a: Operand, b: Operand) -> Tensor:
    return _compare("equal", a, b, equal)


def not_equal_(a: Operand, b: Operand) -> Tensor:
    return _compare("not_equal", a, b, not_equal)


def less(a: Operand, b: Operand) -> Tensor:
    return _compare("less", a, b, lambda x, y: BinaryOp("lt", x, y))


def less_equal(a: Operand, b: Operand) -> Tensor:
    return _compare("less_equal", a, b, lambda x, y: BinaryOp("le", x, y))


def greater(a: Operand, b: Operand) -> Tensor:
    return _compare("greater", a, b, lambda x, y: BinaryOp("lt", y, x))


def greater_equal(a: Operand, b: Operand) -> Tensor:
    return _compare("greater_equal", a, b, lambda x, y: BinaryOp("le", y, x))


# ------------------------------------------------------------------ logic

def _truth(v: Expr) -> Expr:
    """Non-bool operands count as true when non-zero (numpy's logical_*)."""
    t = infer_type(v)
    return v if t.is_bool() else not_equal(v, const(0, t))


def _logical(name: str, operands: list, fn) -> Tensor:
    result_dtype(name, operands)  # checks there is a tensor and the scalars are scalars
    return elementwise(name, operands, lambda *vs: fn(*(_truth(v) for v in vs)), out_dtype=dtypes.boolean)


def logical_and(a: Operand, b: Operand) -> Tensor:
    return _logical("logical_and", [a, b], and_)


def logical_or(a: Operand, b: Operand) -> Tensor:
    return _logical("logical_or", [a, b], or_)


def logical_xor(a: Operand, b: Operand) -> Tensor:
    return _logical("logical_xor", [a, b], not_equal)


def logical_not(a: Operand) -> Tensor:
    return _logical("logical_not", [a], not_)


# ------------------------------------------------------------------ selection

def where(cond: Operand, x: Operand, y: Operand) -> Tensor:
    """``cond ? x : y`` elementwise; `cond` non-bool counts non-zero as true; the
    result has the promoted dtype of `x` and `y` (weak scalars as in `add`)."""
    if not any(isinstance(v, Tensor) for v in (cond, x, y)):
        raise TypeError("where: needs at least one Tensor operand")
    if isinstance(x, Tensor) or isinstance(y, Tensor):
        dtype = result_dtype("where", [x, y])
    else:  # both branches scalars: the default dtype of their kind
        dtype = weak_scalars_dtype("where", [x, y])

    def fn(c: Expr, a: Expr, b: Expr) -> Expr:
        return if_then_else(_truth(c), as_dtype(a, dtype), as_dtype(b, dtype))

    return _where_elementwise(cond, x, y, fn, dtype)


def _where_elementwise(cond: Operand, x: Operand, y: Operand, fn, dtype) -> Tensor:
    # The condition keeps its own dtype while x and y convert to the result dtype: pass
    # no common operand_dtype; Python scalars become constants of the result dtype
    # (a scalar condition becomes a bool constant).
    def wrap(value: Operand, as_bool: bool) -> Any:
        value = python_scalar(value)
        if isinstance(value, Tensor):
            return value
        return _Scalar(scalar_constant("where", value, dtypes.boolean if as_bool else dtype))

    operands = [wrap(cond, True), wrap(x, False), wrap(y, False)]
    tensors = [v for v in operands if isinstance(v, Tensor)]
    return elementwise("where", tensors, lambda *vs: fn(*_merge(operands, vs)), out_dtype=dtype)


class _Scalar:
    """A constant operand already converted to its dtype (where's scalars)."""

    def __init__(self, expr: Expr) -> None:
        self.expr = expr


def _merge(operands: list, values: tuple) -> list:
    it = iter(values)
    return [v.expr if isinstance(v, _Scalar) else next(it) for v in operands]


def clip(x: Tensor, min: Operand | None = None, max: Operand | None = None) -> Tensor:  # noqa: A002
    """``min(max(x, lo), hi)`` in `x`'s dtype (ONNX Clip); a bound of None is absent.
    Bounds may be Python scalars or tensors broadcast with `x`."""
    if not isinstance(x, Tensor):
        raise TypeError(f"clip: x must be a Tensor, got {type(x).__name__}")
    dtype = x.dtype
    operands = [x] + [b for b in (min, max) if b is not None]
    has_lo, has_hi = min is not None, max is not None

    def fn(v: Expr, *bounds: Expr) -> Expr:
        it = iter(bounds)
        if has_lo:
            v = max_(v, next(it))
        if has_hi:
            v = min_(v, next(it))
        return v

    return elementwise("clip", operands, fn, operand_dtype=dtype, out_dtype=dtype,
                       attributes={"has_min": has_lo, "has_max": has_hi})


OPERATORS = {
    "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "maximum": maximum, "minimum": minimum,
    "equal": equal_, "not_equal": not_equal_, "less": less, "less_equal": less_equal,
    "greater": greater, "greater_equal": greater_equal,
    "logical_and": logical_and, "logical_or": logical_or, "logical_xor": logical_xor,
    "logical_not": logical_not, "where": where, "clip": clip,
}
