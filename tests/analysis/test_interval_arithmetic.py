"""Interval arithmetic below `bound_of`: the helpers on infinite ends (as their
docstrings promise, though variables are clamped to their type before they reach
them), and each expression kind the bounder handles: negation at the type's edge,
logical not/and/or decided or not, casts that fit or wrap, selects with a decided or
an open condition, primitives with declared bounds, bit operations and non-integer
expressions. Written to kill mutants of analysis/bounds.py (issue 12)."""
from __future__ import annotations

import pytest

from hidet_framework.analysis.bounds import (
    BOOL_INTERVAL, INF, Interval, _c_div, _corners, _div, _fit, _mod, _mul, as_interval, bound_of, type_range,
)
from hidet_framework.ir import BinaryOp, Call, Cast, IfThenElse, UnaryOp, const, var
from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive

x, y = var("x"), var("y")
I8, I32 = data_type("int8"), data_type("int32")


def test_c_div_on_infinities_and_signs():
    assert _c_div(INF, 2) == INF and _c_div(INF, -2) == -INF and _c_div(-INF, 3) == -INF and _c_div(-INF, -3) == INF
    assert _c_div(INF, 1) == INF and _c_div(-INF, 1) == -INF and _c_div(INF, -1) == -INF
    assert _c_div(7, INF) == 0 and _c_div(-7, -INF) == 0
    assert _c_div(7, 2) == 3 and _c_div(-7, 2) == -3 and _c_div(7, -2) == -3 and _c_div(-7, -2) == 3
    assert _c_div(0, -5) == 0 and _c_div(1, 1) == 1 and _c_div(-1, 1) == -1


def test_mul_of_zero_and_infinity_is_zero():
    assert _mul(0, INF) == 0 and _mul(-INF, 0) == 0 and _mul(2, INF) == INF and _mul(-2, INF) == -INF
    assert _corners(_mul, Interval(0, INF), Interval(-1, 2)) == Interval(-INF, INF)
    assert _corners(_mul, Interval(0, 0), Interval(-INF, INF)) == Interval(0, 0)


def test_div_and_mod_with_open_ends():
    assert _div(Interval(0, INF), Interval(2, 4)) == Interval(0, INF)
    assert _div(Interval(-INF, 10), Interval(2, 2)) == Interval(-INF, 5)
    assert _div(Interval(-8, 8), Interval(-2, -1)) == Interval(-8, 8)
    assert _div(Interval(-8, 8), Interval(-1, 1)) == Interval.unbounded()
    assert _div(Interval(1, 9), Interval(0, 3)) == Interval.unbounded()
    assert _mod(Interval(0, INF), Interval(4, 4)) == Interval(0, 3)
    assert _mod(Interval(-INF, 0), Interval(4, 4)) == Interval(-3, 0)
    assert _mod(Interval(-INF, INF), Interval(-5, -2)) == Interval(-4, 4)
    assert _mod(Interval(0, 3), Interval(0, 4)) == Interval.unbounded()
    assert _mod(Interval(2, 3), Interval(-5, -4)) == Interval(2, 3)       # |a| below every |b|: a
    assert _mod(Interval(0, 4), Interval(-5, -4)) == Interval(0, 4)       # a == 4 may equal |b|


def test_fit_and_type_ranges():
    assert _fit(Interval(-128, 127), I8) == Interval(-128, 127)
    assert _fit(Interval(-129, 0), I8) == Interval.unbounded() and _fit(Interval(0, 128), I8) == Interval.unbounded()
    assert _fit(Interval(0, 1), data_type("float32")) == Interval.unbounded()
    assert type_range(data_type("bool")) == Interval(0, 1) and type_range(data_type("float32")) is None
    assert type_range(data_type("int32x4")) is None and type_range(data_type("uint8")) == Interval(0, 255)


def test_as_interval_forms():
    assert as_interval((2, 5)) == Interval(2, 4) and as_interval(range(1, 3)) == Interval(1, 2)
    assert as_interval(4) == Interval(4, 4) and as_interval(Interval(1, 9)) == Interval(1, 9)
    for bad in ((1, 2, 3), "3", 2.5, [1, 2]):
        with pytest.raises(TypeError, match="cannot read"):
            as_interval(bad)
    assert BOOL_INTERVAL == Interval(0, 1) and str(Interval(1, 2)) == "[1, 2]"


def test_variables_are_clamped_to_their_type():
    x8 = var("x8", "int8")
    assert bound_of(x8, {x8: Interval(-1000, 1000)}) == Interval(-128, 127)
    assert bound_of(x8, {x8: (0, 10)}) == Interval(0, 9)
    assert bound_of(x8) == Interval(-128, 127)
    assert bound_of(var("f", "float32")) == Interval.unbounded()


def test_unary_operators():
    x8 = var("x8", "int8")
    assert bound_of(UnaryOp("neg", x), {x: (-3, 5)}) == Interval(-4, 3)
    assert bound_of(UnaryOp("neg", x8), {x8: (-127, 5)}) == Interval(-4, 127)
    assert bound_of(UnaryOp("neg", x8), {x8: (-128, 5)}) == Interval.unbounded()   # -(-128) wraps
    assert bound_of(UnaryOp("not", x), {x: (1, 5)}) == Interval(0, 0)
    assert bound_of(UnaryOp("not", x), {x: (-5, 0)}) == Interval(0, 0)
    assert bound_of(UnaryOp("not", x), {x: (0, 1)}) == Interval(1, 1)
    assert bound_of(UnaryOp("not", x), {x: (0, 2)}) == BOOL_INTERVAL
    assert bound_of(UnaryOp("not", x), {x: (-1, 1)}) == BOOL_INTERVAL
    assert bound_of(UnaryOp("bit_not", x8), {x8: (0, 3)}) == Interval(-128, 127)


def test_logical_operators():
    t, f, u = {x: (1, 3)}, {x: (0, 1)}, {x: (0, 2)}
    neg = {y: (-3, -1)}
    cases = [
        ("and", {**t, **neg}, Interval(1, 1)), ("and", {**f, y: (1, 2)}, Interval(0, 0)),
        ("and", {**u, y: (1, 2)}, BOOL_INTERVAL), ("and", {**t, y: (0, 1)}, Interval(0, 0)),
        ("or", {**f, y: (0, 1)}, Interval(0, 0)), ("or", {**f, **neg}, Interval(1, 1)),
        ("or", {**u, y: (0, 1)}, BOOL_INTERVAL), ("or", {**t, y: (0, 2)}, Interval(1, 1)),
    ]
    for op, bounds, want in cases:
        assert bound_of(BinaryOp(op, x, y), bounds) == want, (op, bounds)


def test_casts_selects_calls_and_bit_operations():
    assert bound_of(Cast(x, I8), {x: (-5, 100)}) == Interval(-5, 99)
    assert bound_of(Cast(x, I8), {x: (0, 200)}) == Interval.unbounded()
    assert bound_of(Cast(var("f", "float32"), I8)) == Interval(-128, 127)
    assert bound_of(Cast(x, data_type("float32")), {x: (0, 3)}) == Interval.unbounded()
    sel = IfThenElse(x < 5, x, y)
    assert bound_of(sel, {x: (0, 3), y: (10, 20)}) == Interval(0, 2)          # decided: then
    assert bound_of(sel, {x: (6, 9), y: (10, 20)}) == Interval(10, 19)        # decided: else
    assert bound_of(sel, {x: (0, 9), y: (10, 20)}) == Interval(0, 19)         # open: the union
    lane = register_primitive(PrimitiveFunction("test_bounds_lane", "int32", bounds=(0, 32)))
    assert bound_of(lane()) == Interval(0, 31)
    assert bound_of(Call("test_bounds_unknown", (), I8)) == Interval(-128, 127)
    assert bound_of(BinaryOp("bit_and", x, const(7)), {x: (0, 3)}) == type_range(I32)
    assert bound_of(BinaryOp("shl", x, const(1)), {x: (0, 3)}) == type_range(I32)
    assert bound_of(x + var("f", "float32")) == Interval.unbounded()
    assert bound_of(BinaryOp("min", x, y), {x: (0, 5), y: (2, 3)}) == Interval(0, 2)
    assert bound_of(BinaryOp("max", x, y), {x: (0, 5), y: (2, 3)}) == Interval(2, 4)


def test_untypable_expressions_are_unbounded():
    from hidet_framework.ir.types import TensorType

    t = var("t", TensorType(data_type("float32"), (4,)))
    assert bound_of(t + 1) == Interval.unbounded()
