"""The ``cpu`` spellings of primitives: libm for the core's math functions
(``hidet_framework.ir.math_functions``: ``exp_f32`` prints ``expf(x)``, ``exp_f64``
prints ``exp(x)``), and the OpenMP thread of a parallel loop.

Kernels call the core's generic builders (`exp`, `sqrt`, `fma`...), re-exported here;
they pick the variant from the argument dtypes.
"""
from __future__ import annotations

from hidet_framework.ir import dtypes
from hidet_framework.ir.math_functions import (  # noqa: F401  (re-exported for kernels)
    abs_, ceil, cos, erf, exp, floor, fma, fmax, fmin, log, math_primitive, pow_,
    register_math_spellings, rsqrt, sin, sqrt, tanh,
)
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive

__all__ = ["C_MATH", "math_primitive", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "abs_",
           "floor", "ceil", "sin", "cos", "pow_", "fmin", "fmax", "fma"]

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
