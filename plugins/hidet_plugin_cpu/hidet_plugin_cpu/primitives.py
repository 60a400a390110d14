"""Math primitives of the ``cpu`` target (libm), with Python implementations for the IR
evaluator.

Naming: one primitive per function and float type, ``<name>_f32`` and ``<name>_f64``
(``exp_f32`` prints ``expf(x)``, ``exp_f64`` prints ``exp(x)``), so a call's result
type is fixed by its name and backends can register the same names for their own
target kind (the CUDA plugin registers ``exp_f32`` for ``cuda``; result types are
`DataType` objects and must agree). Kernels usually call the generic builders below
(`exp`, `sqrt`, `fma`, ...), which pick the variant from the argument's dtype; float16
and bfloat16 arguments are computed in float32 and the result cast back.

Available: exp log sqrt rsqrt tanh erf abs floor ceil sin cos (one argument), pow min
max (two; min/max are C's fmin/fmax: a NaN operand yields the other one), fma (three).
Also ``cpu_thread_index()`` / ``cpu_num_threads()``: the OpenMP thread inside a
parallel loop.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Cast, Expr, convert
from hidet_framework.ir.primitives import PrimitiveFunction, lookup_primitive, register_primitive
from hidet_framework.ir.type_infer import infer_type

__all__ = ["MATH_FUNCTIONS", "math_primitive", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "abs_",
           "floor", "ceil", "sin", "cos", "pow_", "fmin", "fmax", "fma"]

_FLOATS = {"f32": (dtypes.float32, np.float32, "f"), "f64": (dtypes.float64, np.float64, "")}


def _fma_exact(a: Any, b: Any, c: Any) -> float:
    """a*b+c rounded once (to float64): exact rational arithmetic, like C's fma."""
    if not all(math.isfinite(float(x)) for x in (a, b, c)):
        return float(a) * float(b) + float(c)
    return float(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


# name: (C spelling with a `{s}` where the float32 suffix `f` goes, Python implementation)
MATH_FUNCTIONS: dict[str, tuple[str, Callable[..., float]]] = {
    "exp": ("exp{s}({0})", np.exp),
    "log": ("log{s}({0})", np.log),
    "sqrt": ("sqrt{s}({0})", np.sqrt),
    "rsqrt": ("1.0{s} / sqrt{s}({0})", lambda x: 1.0 / np.sqrt(x)),
    "tanh": ("tanh{s}({0})", np.tanh),
    "erf": ("erf{s}({0})", lambda x: math.erf(float(x))),
    "abs": ("fabs{s}({0})", np.abs),
    "floor": ("floor{s}({0})", np.floor),
    "ceil": ("ceil{s}({0})", np.ceil),
    "sin": ("sin{s}({0})", np.sin),
    "cos": ("cos{s}({0})", np.cos),
    "pow": ("pow{s}({0}, {1})", np.power),
    "min": ("fmin{s}({0}, {1})", np.fmin),
    "max": ("fmax{s}({0}, {1})", np.fmax),
    "fma": ("fma{s}({0}, {1}, {2})", _fma_exact),
}


def _evaluator(impl: Callable[..., Any], np_type: Any) -> Callable[..., Any]:
    def evaluate(*args: Any) -> Any:
        with np.errstate(all="ignore"):  # inf/nan results are values, like in C
            return np_type(impl(*(np_type(a) for a in args)))
    return evaluate


def _register_all() -> None:
    for name, (template, impl) in MATH_FUNCTIONS.items():
        for short, (dtype, np_type, suffix) in _FLOATS.items():
            # str.format would read `{s}` and the argument slots at once; fill `{s}` first.
            register_primitive(PrimitiveFunction(
                name=f"{name}_{short}", ret_type=dtype,
                emit={"cpu": template.replace("{s}", suffix)}, evaluate=_evaluator(impl, np_type)))
    register_primitive(PrimitiveFunction("cpu_thread_index", dtypes.int32, {"cpu": "omp_get_thread_num()"},
                                         evaluate=lambda: 0))
    register_primitive(PrimitiveFunction("cpu_num_threads", dtypes.int32, {"cpu": "omp_get_num_threads()"},
                                         evaluate=lambda: 1))


_register_all()


def math_primitive(name: str, *args: Any) -> Expr:
    """A call of math function `name` on `args`, the variant chosen by their dtype.

    float64 if any argument is float64, else float32; float16/bfloat16 arguments are
    converted to float32 and the result converted back to the first argument's dtype.
    """
    if name not in MATH_FUNCTIONS:
        raise KeyError(f"unknown math function {name!r}; known: {', '.join(MATH_FUNCTIONS)}")
    args = [convert(a) for a in args]
    types = [infer_type(a) for a in args]
    if not all(isinstance(t, dtypes.DataType) and t.is_float() and t.lanes == 1 for t in types):
        raise TypeError(f"{name} takes scalar float arguments, got {', '.join(map(str, types))}")
    short = "f64" if dtypes.float64 in types else "f32"
    compute = _FLOATS[short][0]
    prim = lookup_primitive(f"{name}_{short}")
    call = prim(*(a if t is compute else Cast(a, compute) for a, t in zip(args, types)))
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
