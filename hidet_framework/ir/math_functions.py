"""Math functions as primitives: their names, meaning and dtype dispatch.

The core declares one primitive per function and float type, ``<name>_f32`` and
``<name>_f64`` (so a call's result type follows from its name), with a Python
implementation the IR evaluator uses and no spelling: each backend plugin gives them
its own (``register_math_spellings("cpu", {"exp": "exp{s}({0})", ...})``), exactly like
the GPU worker indices. Operators and kernels call the generic builders (`exp`,
`sqrt`, `fma`...), which pick the variant from the argument dtypes: float64 if any
argument is float64, else float32; float16/bfloat16 arguments are computed in float32
and the result converted back to the first argument's dtype.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Mapping

import numpy as np

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Cast, Expr, convert
from hidet_framework.ir.primitives import PrimitiveFunction, lookup_primitive, register_primitive
from hidet_framework.ir.type_infer import cast_if_needed, infer_type


def _fma_exact(a: Any, b: Any, c: Any) -> float:
    """a*b+c rounded once (to float64), like C's and the GPU's fma."""
    if not all(math.isfinite(float(x)) for x in (a, b, c)):
        return float(a) * float(b) + float(c)
    return float(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


# name -> Python implementation (arity follows from it). min/max follow C's fmin/fmax:
# a NaN operand yields the other one.
MATH_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh, "erf": lambda x: math.erf(float(x)), "abs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "sin": np.sin, "cos": np.cos, "pow": np.power, "min": np.fmin,
    "max": np.fmax, "fma": _fma_exact,
}

FLOAT_VARIANTS = {"f32": (dtypes.float32, np.float32, "f"), "f64": (dtypes.float64, np.float64, "")}


def _evaluator(impl: Callable[..., Any], np_type: Any) -> Callable[..., Any]:
    def evaluate(*args: Any) -> Any:
        with np.errstate(all="ignore"):  # inf/nan results are values, like in C
            return np_type(impl(*(np_type(a) for a in args)))
    return evaluate


for _name, _impl in MATH_FUNCTIONS.items():
    for _short, (_dtype, _np_type, _) in FLOAT_VARIANTS.items():
        register_primitive(PrimitiveFunction(f"{_name}_{_short}", _dtype, evaluate=_evaluator(_impl, _np_type)))


def register_math_spellings(target_kind: str, spellings: Mapping[str, str]) -> list[str]:
    """Give every math primitive its spelling on `target_kind`. A spelling is a format
    text with ``{0}``... for the arguments and ``{s}`` where the float32 suffix ``f``
    goes (``"exp{s}({0})"`` prints ``expf(x)`` / ``exp(x)``). Returns the texts
    registered (backends reserve the identifiers they use)."""
    missing = sorted(set(MATH_FUNCTIONS) - set(spellings))
    if missing:
        raise ValueError(f"{target_kind}: no spelling for math functions {missing}")
    texts = []
    for name, template in spellings.items():
        for short, (dtype, _, suffix) in FLOAT_VARIANTS.items():
            text = template.replace("{s}", suffix)  # `{s}` first: format() would read the slots too
            register_primitive(PrimitiveFunction(f"{name}_{short}", dtype, {target_kind: text}))
            texts.append(text)
    return texts


def math_primitive(name: str, *args: Any) -> Expr:
    """A call of math function `name` on `args`, the variant chosen by their dtypes."""
    if name not in MATH_FUNCTIONS:
        raise KeyError(f"unknown math function {name!r}; known: {', '.join(MATH_FUNCTIONS)}")
    args = [convert(a) for a in args]
    types = [infer_type(a) for a in args]
    if not all(isinstance(t, dtypes.DataType) and t.is_float() and t.lanes == 1 for t in types):
        raise TypeError(f"{name} takes scalar float arguments, got {', '.join(map(str, types))}")
    short = "f64" if dtypes.float64 in types else "f32"
    compute = FLOAT_VARIANTS[short][0]
    call = lookup_primitive(f"{name}_{short}")(*(cast_if_needed(a, compute) for a in args))
    narrow = types[0] if types[0] in (dtypes.float16, dtypes.bfloat16) else None
    return Cast(call, narrow) if narrow is not None else call


def exp(x: Any) -> Expr: return math_primitive("exp", x)
def log(x: Any) -> Expr: return math_primitive("log", x)
def sqrt(x: Any) -> Expr: return math_primitive("sqrt", x)
def rsqrt(x: Any) -> Expr: return math_primitive("rsqrt", x)
def tanh(x: Any) -> Expr: return math_primitive("tanh", x)
def erf(x: Any) -> Expr: return math_primitive("erf", x)
def abs_(x: Any) -> Expr: return math_primitive("abs", x)
def floor(x: Any) -> Expr: return math_primitive("floor", x)
def ceil(x: Any) -> Expr: return math_primitive("ceil", x)
def sin(x: Any) -> Expr: return math_primitive("sin", x)
def cos(x: Any) -> Expr: return math_primitive("cos", x)
def pow_(x: Any, y: Any) -> Expr: return math_primitive("pow", x, y)
def fmin(x: Any, y: Any) -> Expr: return math_primitive("min", x, y)
def fmax(x: Any, y: Any) -> Expr: return math_primitive("max", x, y)
def fma(a: Any, b: Any, c: Any) -> Expr: return math_primitive("fma", a, b, c)
