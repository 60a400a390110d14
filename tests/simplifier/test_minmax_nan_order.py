"""Float min/max keep their operand order through the simplifier. The IR's ``max(a, b)``
is numpy's ``maximum`` (session 14; ``min``: ``minimum``; the evaluator and both backends
agree): a NaN operand is the result on either side, and a tie of -0.0 with 0.0 gives `b`,
so the order still decides the sign of a zero (``max(0.0, x)`` with x = -0.0 is -0.0,
``max(x, 0.0)`` is 0.0). Before, ``max(a, b)`` was ``b > a ? b : a``, which returned `a`
on a NaN, and the simplifier once moved the constant to the right as for integers
(``max(-inf, x)`` printed as ``hidet_max_float32(x, -INFINITY)``). Integer min/max still
put the constant on the right (the bound rules expect it)."""
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
def test_float_order_decides_the_zero_and_simplify_keeps_the_value(op):
    """The value of each form, before and after simplify (the evaluator binds x): with x =
    NaN both orders give NaN; with a tie of zeros the second operand comes back."""
    x = var("x", "float32")
    c = const(-INF if op == "max" else INF, "float32")
    zero = const(0.0, "float32")
    for e in (OPS[op](c, x), OPS[op](x, c)):
        for form in (e, simplify(e)):
            assert math.isnan(float(evaluate_expr(form, {x: np.float32(np.nan)}))), form
    for e, negative in ((OPS[op](zero, x), True), (OPS[op](x, zero), False)):
        for form in (e, simplify(e)):
            value = float(evaluate_expr(form, {x: np.float32(-0.0)}))
            assert value == 0.0 and math.copysign(1.0, value) == (-1.0 if negative else 1.0), (form, value)


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
    assert math.isnan(nan_first.value)                      # numpy's maximum: NaN
    nan_second = simplify(minimum(const(1.0, "float32"), const(math.nan, "float32")))
    assert math.isnan(nan_second.value)                     # on either side
    y = var("y", "float32")
    assert_structural_equal(simplify(const(2.0, "float32") + y), y + const(2.0, "float32"))
    assert_structural_equal(simplify(const(2.0, "float32") * y), y * const(2.0, "float32"))
