"""Float min/max keep their operand order through the simplifier. The IR's ``max(a, b)``
is ``b > a ? b : a`` (``min``: ``b < a ? b : a``; the evaluator and both backends agree):
with a NaN operand it returns `a`, so ``max(-inf, x)`` drops a NaN x while
``max(x, -inf)`` keeps it. The simplifier once moved the constant to the right as for
integers (``max(-inf, x)`` printed as ``hidet_max_float32(x, -INFINITY)``). Integer
min/max still put the constant on the right (the bound rules expect it)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hidet_framework.analysis.evaluator import evaluate_expr
from hidet_framework.ir import BinaryOp, Constant, assert_structural_equal, const, maximum, minimum, var
from hidet_framework.simplifier.simplify import simplify

INF = math.inf
OPS = {"max": maximum, "min": minimum}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("c", [-INF, INF, 0.0, -2.5, math.nan])
def test_float_min_max_keep_operand_order(dtype, op, c):
    x = var("x", dtype)
    for const_first in (True, False):
        e = OPS[op](const(c, dtype), x) if const_first else OPS[op](x, const(c, dtype))
        r = simplify(e)
        assert isinstance(r, BinaryOp) and r.op == op, r
        constant, other = (r.a, r.b) if const_first else (r.b, r.a)
        assert other is x and isinstance(constant, Constant), r  # the constant stays where it was
        assert constant.value == c or (math.isnan(c) and math.isnan(constant.value)), r


@pytest.mark.parametrize("op", ["max", "min"])
def test_float_order_decides_nan_and_simplify_keeps_the_value(op):
    """The value of each form, before and after simplify, with x = NaN (the evaluator
    binds x): constant first drops the NaN, constant second keeps it."""
    x = var("x", "float32")
    c = const(-INF if op == "max" else INF, "float32")
    for e, keeps_nan in ((OPS[op](c, x), False), (OPS[op](x, c), True)):
        for form in (e, simplify(e)):
            value = float(evaluate_expr(form, {x: np.float32(np.nan)}))
            assert math.isnan(value) == keeps_nan, (form, value)


@pytest.mark.parametrize("op", ["max", "min"])
def test_integer_min_max_still_canonical(op):
    n = var("n")
    assert_structural_equal(simplify(OPS[op](7, n)), OPS[op](n, 7))
    w = var("w", "int64")
    assert_structural_equal(simplify(OPS[op](const(7, "int64"), w)), OPS[op](w, const(7, "int64")))


def test_what_still_simplifies():
    """Constant folding (NaN included, with the IR's order), integer bounds, x op x and
    the commutative float ops with a constant (add/mul: the order changes no NaN)."""
    j, n = var("j"), var("n")
    bounds = {j: (0, 4)}
    assert_structural_equal(simplify(minimum(3, j), bounds), j)
    assert_structural_equal(simplify(maximum(-1, j), bounds), j)
    assert_structural_equal(simplify(maximum(n, n)), n)
    folded = simplify(maximum(const(-INF, "float32"), const(2.5, "float32")))
    assert_structural_equal(folded, const(2.5, "float32"))
    nan_first = simplify(maximum(const(math.nan, "float32"), const(1.0, "float32")))
    assert math.isnan(nan_first.value)                      # a returned: NaN
    nan_second = simplify(maximum(const(1.0, "float32"), const(math.nan, "float32")))
    assert nan_second.value == 1.0                          # a returned: 1
    y = var("y", "float32")
    assert_structural_equal(simplify(const(2.0, "float32") + y), y + const(2.0, "float32"))
    assert_structural_equal(simplify(const(2.0, "float32") * y), y * const(2.0, "float32"))
