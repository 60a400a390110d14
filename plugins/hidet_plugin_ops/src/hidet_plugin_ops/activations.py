"""More elementwise operators, those ONNX models use beyond `unary`/`binary`: rounding,
trigonometry, sign, reciprocal, NaN/inf tests, the parametric activations (elu,
leaky_relu, hard_sigmoid, hard_swish, softplus, prelu) and the remainder (mod).

Float functions of half floats are computed in float32 and rounded once, like `unary`.
"""
from __future__ import annotations

import math

from hidet_framework.graph import Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import BinaryOp, Expr, const, if_then_else, logical_and, logical_or, maximum, minimum
from hidet_framework.ir.expr import equal as eq
from hidet_framework.ir.expr import not_equal
from hidet_framework.ir.type_infer import infer_type

from .binary import _floor_div_int
from .common import OperatorAttributeError, math_call, require_tensor
from .elementwise import compute_float_dtype, elementwise, float_result_dtype, result_dtype


def _c(value: float, like: Expr) -> Expr:
    return const(value, infer_type(like))


def _float_function(name: str, x: Tensor, body, attributes: dict | None = None) -> Tensor:
    x = require_tensor(name, x)
    out = float_result_dtype(x.dtype)
    return elementwise(name, [x], body, operand_dtype=compute_float_dtype(out), out_dtype=out,
                       attributes=attributes)


def _same_dtype(name: str, x: Tensor, float_body, int_body=None, attributes: dict | None = None) -> Tensor:
    """Integers (and bool) keep their dtype with `int_body` (identity by default);
    floats go through `float_body` in their compute dtype."""
    x = require_tensor(name, x)
    if not x.dtype.is_float():
        return elementwise(name, [x], int_body or (lambda v: v), attributes=attributes)
    return _float_function(name, x, float_body, attributes)


def floor(x: Tensor) -> Tensor:
    return _same_dtype("floor", x, lambda v: math_call("floor", v))


def ceil(x: Tensor) -> Tensor:
    return _same_dtype("ceil", x, lambda v: math_call("ceil", v))


def round(x: Tensor) -> Tensor:  # noqa: A001 - the operator's name is round
    """Round half to even (numpy's and ONNX's rounding), from floor: ties go to the
    even neighbour."""
    def body(v: Expr) -> Expr:
        low = math_call("floor", v)
        frac = v - low
        half = _c(0.5, v)
        low_is_odd = not_equal(math_call("floor", low * half) * _c(2.0, v), low)
        up = logical_or(BinaryOp("lt", half, frac), logical_and(eq(frac, half), low_is_odd))
        return if_then_else(up, low + _c(1.0, v), low)
    return _same_dtype("round", x, body)


def sin(x: Tensor) -> Tensor:
    return _float_function("sin", x, lambda v: math_call("sin", v))


def cos(x: Tensor) -> Tensor:
    return _float_function("cos", x, lambda v: math_call("cos", v))


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 in `x`'s dtype; NaN stays NaN (neither comparison holds, so the
    value itself is returned)."""
    x = require_tensor("sign", x)
    if x.dtype.is_bool():
        return elementwise("sign", [x], lambda v: v)
    zero, one = const(0, x.dtype), const(1, x.dtype)

    def body(v: Expr) -> Expr:
        if x.dtype.kind == "uint":
            return if_then_else(BinaryOp("lt", zero, v), one, zero)
        negative = if_then_else(BinaryOp("lt", v, zero), -one, v)  # v: 0 (or NaN) stays
        return if_then_else(BinaryOp("lt", zero, v), one, negative)
    return elementwise("sign", [x], body)


def reciprocal(x: Tensor) -> Tensor:
    return _float_function("reciprocal", x, lambda v: _c(1.0, v) / v)


def isnan(x: Tensor) -> Tensor:
    """True where `x` is NaN (integers never are)."""
    x = require_tensor("isnan", x)
    if not x.dtype.is_float():
        return elementwise("isnan", [x], lambda v: const(False, dtypes.boolean), out_dtype=dtypes.boolean)
    return elementwise("isnan", [x], lambda v: not_equal(v, v), out_dtype=dtypes.boolean)


def isinf(x: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """True where `x` is +inf (`detect_positive`) or -inf (`detect_negative`)."""
    x = require_tensor("isinf", x)
    attributes = {"detect_positive": bool(detect_positive), "detect_negative": bool(detect_negative)}
    if not x.dtype.is_float():
        return elementwise("isinf", [x], lambda v: const(False, dtypes.boolean), out_dtype=dtypes.boolean,
                           attributes=attributes)

    def body(v: Expr) -> Expr:
        tests = []
        if detect_positive:
            tests.append(eq(v, const(math.inf, x.dtype)))
        if detect_negative:
            tests.append(eq(v, const(-math.inf, x.dtype)))
        if not tests:
            return const(False, dtypes.boolean)
        return tests[0] if len(tests) == 1 else logical_or(*tests)
    return elementwise("isinf", [x], body, out_dtype=dtypes.boolean, attributes=attributes)


# ------------------------------------------------------------------ activations

def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    def body(v: Expr) -> Expr:
        return if_then_else(BinaryOp("lt", _c(0.0, v), v), v, _c(alpha, v) * (math_call("exp", v) - _c(1.0, v)))
    return _float_function("elu", x, body, {"alpha": float(alpha)})


def leaky_relu(x: Tensor, alpha: float = 0.01) -> Tensor:
    """``x`` where non-negative, ``alpha * x`` elsewhere."""
    def body(v: Expr) -> Expr:
        return if_then_else(BinaryOp("lt", v, _c(0.0, v)), _c(alpha, v) * v, v)
    return _float_function("leaky_relu", x, body, {"alpha": float(alpha)})


def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    """``max(0, min(1, alpha * x + beta))``; NaN gives NaN (ONNX), as the IR's ``max`` /
    ``min`` keep a NaN on either side (numpy's maximum / minimum)."""
    def body(v: Expr) -> Expr:
        return maximum(minimum(_c(alpha, v) * v + _c(beta, v), _c(1.0, v)), _c(0.0, v))
    return _float_function("hard_sigmoid", x, body, {"alpha": float(alpha), "beta": float(beta)})


def hard_swish(x: Tensor) -> Tensor:
    """``x * max(0, min(1, x / 6 + 1 / 2))`` (ONNX HardSwish; the value first, as above)."""
    def body(v: Expr) -> Expr:
        return v * maximum(minimum(v * _c(1.0 / 6.0, v) + _c(0.5, v), _c(1.0, v)), _c(0.0, v))
    return _float_function("hard_swish", x, body)


def softplus(x: Tensor) -> Tensor:
    """``log(1 + exp(x))``, computed as ``max(x, 0) + log(1 + exp(-|x|))`` so large
    inputs neither overflow nor lose the linear part."""
    def body(v: Expr) -> Expr:
        absolute = if_then_else(BinaryOp("lt", v, _c(0.0, v)), -v, v)
        return maximum(v, _c(0.0, v)) + math_call("log", _c(1.0, v) + math_call("exp", -absolute))
    return _float_function("softplus", x, body)


def prelu(x: Tensor, slope: Tensor) -> Tensor:
    """``x`` where non-negative, ``slope * x`` elsewhere; `slope` broadcasts to `x`."""
    x = require_tensor("prelu", x)
    slope = require_tensor("prelu", slope, "slope")
    dtype = result_dtype("prelu", [x, slope])

    def body(v: Expr, s: Expr) -> Expr:
        return if_then_else(BinaryOp("lt", v, const(0, dtype)), s * v, v)
    return elementwise("prelu", [x, slope], body, operand_dtype=dtype, out_dtype=dtype)


def mod(a: Tensor, b: Tensor, fmod: bool = False) -> Tensor:
    """The remainder: with `fmod` it has the sign of the dividend (C's fmod, ``%``);
    without, the sign of the divisor (Python's ``%``, numpy's ``mod``), for integers
    and floats alike."""
    dtype = result_dtype("mod", [a, b])
    if not isinstance(fmod, bool):
        raise OperatorAttributeError(f"mod: fmod must be a bool, got {fmod!r}")
    if dtype.is_float():
        def body(x: Expr, y: Expr) -> Expr:
            if fmod:  # x - trunc(x / y) * y
                q = x / y
                t = if_then_else(BinaryOp("lt", q, _c(0.0, q)), math_call("ceil", q), math_call("floor", q))
                return x - t * y
            return x - math_call("floor", x / y) * y
    elif fmod:
        def body(x: Expr, y: Expr) -> Expr:
            return BinaryOp("mod", x, y)
    else:
        def body(x: Expr, y: Expr) -> Expr:
            return x - _floor_div_int(x, y) * y
    compute = compute_float_dtype(dtype) if dtype.is_float() else dtype
    return elementwise("mod", [a, b], body, operand_dtype=compute, out_dtype=dtype, attributes={"fmod": fmod})


OPERATORS = {
    "floor": floor, "ceil": ceil, "round": round, "sin": sin, "cos": cos, "sign": sign,
    "reciprocal": reciprocal, "isnan": isnan, "isinf": isinf, "elu": elu, "leaky_relu": leaky_relu,
    "hard_sigmoid": hard_sigmoid, "hard_swish": hard_swish, "softplus": softplus, "prelu": prelu, "mod": mod,
}
