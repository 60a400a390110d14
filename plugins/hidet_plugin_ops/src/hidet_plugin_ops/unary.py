"""Elementwise unary operators: arithmetic, math functions, activations, cast.

Float-valued functions of half floats are computed in float32 and rounded once at the
end; of integers and bool they give float32 (numpy would give float64; float32 is the
framework's default float).
"""
from __future__ import annotations

import math
from typing import Any

from hidet_framework.graph import Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.expr import Expr, const, if_then_else, maximum, not_equal

from .common import OperatorAttributeError, math_call, require_tensor
from .elementwise import compute_float_dtype, elementwise, float_result_dtype


def _float_function(name: str, x: Tensor, body, attributes: dict | None = None) -> Tensor:
    """An elementwise float function: `body(v)` gets the element in its compute dtype
    (float32 or float64) and builds the value; the output has `x`'s float dtype."""
    x = require_tensor(name, x)
    out = float_result_dtype(x.dtype)
    return elementwise(name, [x], body, operand_dtype=compute_float_dtype(out), out_dtype=out,
                       attributes=attributes)


def _c(value: float, like: Expr) -> Expr:
    """A float constant in the dtype of `like` (so float64 math stays float64)."""
    from hidet_framework.ir.type_infer import infer_type

    return const(value, infer_type(like))


# ------------------------------------------------------------------ arithmetic

def neg(x: Tensor) -> Tensor:
    """``-x``."""
    x = require_tensor("neg", x)
    return elementwise("neg", [x], lambda v: -v)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - the operator's name is abs
    """``|x|`` (a select, so integers stay integers and -0.0 needs no primitive)."""
    x = require_tensor("abs", x)
    if x.dtype.is_bool():
        return elementwise("abs", [x], lambda v: v)
    return elementwise("abs", [x], lambda v: if_then_else(v < const(0, x.dtype), -v, v))


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``."""
    x = require_tensor("relu", x)
    return elementwise("relu", [x], lambda v: maximum(v, const(0, x.dtype)))


# ------------------------------------------------------------------ math functions

def exp(x: Tensor) -> Tensor:
    return _float_function("exp", x, lambda v: math_call("exp", v))


def log(x: Tensor) -> Tensor:
    return _float_function("log", x, lambda v: math_call("log", v))


def sqrt(x: Tensor) -> Tensor:
    return _float_function("sqrt", x, lambda v: math_call("sqrt", v))


def rsqrt(x: Tensor) -> Tensor:
    """``1 / sqrt(x)``."""
    return _float_function("rsqrt", x, lambda v: math_call("rsqrt", v))


def erf(x: Tensor) -> Tensor:
    return _float_function("erf", x, lambda v: math_call("erf", v))


def tanh(x: Tensor) -> Tensor:
    return _float_function("tanh", x, lambda v: math_call("tanh", v))


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    return _float_function("sigmoid", x, lambda v: _c(1.0, v) / (_c(1.0, v) + math_call("exp", -v)))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``: exactly with erf (``approximate="none"``), or with the tanh
    approximation (``approximate="tanh"``), as in PyTorch and ONNX Gelu."""
    if approximate == "none":
        def body(v: Expr) -> Expr:
            return _c(0.5, v) * v * (_c(1.0, v) + math_call("erf", v * _c(1.0 / math.sqrt(2.0), v)))
    elif approximate == "tanh":
        def body(v: Expr) -> Expr:
            inner = _c(math.sqrt(2.0 / math.pi), v) * (v + _c(0.044715, v) * v * v * v)
            return _c(0.5, v) * v * (_c(1.0, v) + math_call("tanh", inner))
    else:
        raise OperatorAttributeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _float_function("gelu", x, body, {"approximate": approximate})


# ------------------------------------------------------------------ cast

def cast(x: Tensor, dtype: Any) -> Tensor:
    """``x`` converted to `dtype`. Floats to integers truncate toward zero (C, numpy
    ``astype``); anything to bool is ``x != 0``."""
    x = require_tensor("cast", x)
    target = data_type(dtype)
    if target.is_bool():
        return elementwise("cast", [x], lambda v: not_equal(v, const(0, x.dtype)) if not x.dtype.is_bool() else v,
                           out_dtype=dtypes.boolean, attributes={"dtype": target.name})
    return elementwise("cast", [x], lambda v: v, out_dtype=target, attributes={"dtype": target.name})


OPERATORS = {
    "neg": neg, "abs": abs, "relu": relu, "exp": exp, "log": log, "sqrt": sqrt, "rsqrt": rsqrt,
    "erf": erf, "tanh": tanh, "sigmoid": sigmoid, "gelu": gelu, "cast": cast,
}
