"""The ``cpu`` spellings of primitives: libm for the core's math functions
(``hidet_framework.ir.math_functions``: ``exp_f32`` prints ``expf(x)``, ``exp_f64``
prints ``exp(x)``), and the OpenMP thread of a parallel loop.

Kernels call the core's generic builders (`exp`, `sqrt`, `fma`...), re-exported here;
they pick the variant from the argument dtypes. `own_exp` is the float32 exp of our own
(``hidet_expf``, vector_math.py), a primitive of its own so that only the kernels that
ask for it (the softmax) call it; `row_max` / `row_sum` reduce a kernel's lane
accumulators with vector instructions (``hidet_row_max_f32``, row_math.py), and
`exp_sum` replaces a row by ``exp(row - top)`` and sums it (``hidet_exp_sum_f32``,
row_math.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hidet_framework.ir import dtypes
from hidet_framework.ir.math_functions import (  # noqa: F401  (re-exported for kernels)
    abs_, ceil, cos, erf, exp, floor, fma, fmax, fmin, log, math_primitive, pow_,
    register_math_spellings, rsqrt, sin, sqrt, tanh,
)
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive
from hidet_framework.ir.type_infer import cast_if_needed

__all__ = ["C_MATH", "math_primitive", "own_exp", "exp_sum", "row_max", "row_sum", "ROW_LANES", "exp", "log",
           "sqrt", "rsqrt", "tanh", "erf", "abs_", "floor", "ceil", "sin", "cos", "pow_", "fmin", "fmax", "fma"]

# name: C spelling, `{s}` where the float32 suffix `f` goes
C_MATH = {
    "exp": "exp{s}({0})", "log": "log{s}({0})", "sqrt": "sqrt{s}({0})",
    "rsqrt": "1.0{s} / sqrt{s}({0})", "tanh": "hidet_tanh{s}({0})", "erf": "hidet_erf{s}({0})",  # vector_math.OWN_FUNCTIONS
    "abs": "fabs{s}({0})", "floor": "floor{s}({0})", "ceil": "ceil{s}({0})",
    "sin": "sin{s}({0})", "cos": "cos{s}({0})", "pow": "pow{s}({0}, {1})",
    "min": "fmin{s}({0}, {1})", "max": "fmax{s}({0}, {1})", "fma": "fma{s}({0}, {1}, {2})",
}

register_math_spellings("cpu", C_MATH)
register_primitive(PrimitiveFunction("cpu_thread_index", dtypes.int32, {"cpu": "omp_get_thread_num()"},
                                     evaluate=lambda: 0))
register_primitive(PrimitiveFunction("cpu_num_threads", dtypes.int32, {"cpu": "omp_get_num_threads()"},
                                     evaluate=lambda: 1))


def _exp32(x):
    with np.errstate(all="ignore"):
        return np.float32(np.exp(np.float32(x)))


_OWN_EXP = register_primitive(PrimitiveFunction("own_exp_f32", dtypes.float32, {"cpu": "hidet_expf({0})"},
                                                evaluate=_exp32))


def own_exp(x):
    """exp of a float32 value (other float types are converted) through ``hidet_expf``
    (vector_math.py: 2.5 ULP, denormal results and IEEE special values included)."""
    return _OWN_EXP(cast_if_needed(x, dtypes.float32))


# lane counts the row reductions take (row_math.py): 8 * 2^k up to 128
ROW_LANES = (8, 16, 32, 64, 128)
_ROW = {op: register_primitive(PrimitiveFunction(f"own_row_{op}_f32", dtypes.float32,
                                                 {"cpu": f"hidet_row_{op}_f32({{0}}, {{1}})"}))
        for op in ("max", "sum")}


def _row(op: str, first: Any, lanes: int):
    if lanes not in ROW_LANES:
        raise ValueError(f"row_{op}: {lanes} lanes; the row reductions take {ROW_LANES}")
    return _ROW[op](first, lanes)


def row_max(first: Any, lanes: int):
    """The max of the `lanes` float32 values from the address `first` (a local array's
    ``address_of(part[0])``), by the halving tree: the IR's max per step (a NaN is kept)."""
    return _row("max", first, lanes)


def row_sum(first: Any, lanes: int):
    """The sum of the `lanes` float32 values from the address `first`, by the halving
    tree (p[j] + p[j + lanes/2], ...)."""
    return _row("sum", first, lanes)


_EXP_SUM = register_primitive(PrimitiveFunction("own_exp_sum_f32", dtypes.float32,
                                                {"cpu": "hidet_exp_sum_f32({0}, {1}, {2})"}))


def exp_sum(first: Any, top: Any, count: Any):
    """``e[j] = exp(e[j] - top)`` for the `count` float32 values from the address
    `first` (in place), and their sum: 32 lane accumulators combined by the halving
    tree, then the tail in order (``hidet_exp_sum_f32``, row_math.py)."""
    return _EXP_SUM(first, cast_if_needed(top, dtypes.float32), count)
