"""Interval analysis: examples, and the property that the computed interval contains
every value the evaluator produces."""
from __future__ import annotations

import math

from hypothesis import assume, given, strategies as st

from hidet_framework.ir import BinaryOp, const, if_then_else, logical_not, var
from hidet_framework.analysis.bounds import Interval, as_interval, bound_of
from hidet_framework.analysis.evaluator import EvaluationError, evaluate_expr

i, j, n = var("i"), var("j"), var("n")
B = {i: (0, 16), j: (0, 4)}


def test_examples():
    assert bound_of(i * 4 + j, B) == Interval(0, 63)
    assert bound_of((i * 4 + j) // 4, B) == Interval(0, 15)
    assert bound_of(j % 4, B) == Interval(0, 3)
    assert bound_of(n % 8) == Interval(-7, 7)
    assert bound_of(i - j, B) == Interval(-3, 15)
    assert bound_of(i < 16, B) == Interval(1, 1)
    assert bound_of(i < 15, B) == Interval(0, 1)
    assert bound_of(if_then_else(i < 4, j, const(10)), B) == Interval(0, 10)
    assert bound_of(logical_not(i < 16), B) == Interval(0, 0)
    assert bound_of(logical_not(i > 16), B) == Interval(1, 1)


def test_unknown_variables_range_over_their_type():
    assert bound_of(n) == Interval(-(2**31), 2**31 - 1)
    assert bound_of(var("u", "uint8")) == Interval(0, 255)


def test_possible_wrap_is_unbounded():
    assert not bound_of(n + 1).is_bounded()
    assert not bound_of(i * 2**30, B).is_bounded()
    assert bound_of(var("f", "float32")) == Interval.unbounded()


def test_as_interval_reads_half_open_pairs():
    assert as_interval((0, 8)) == Interval(0, 7)
    assert as_interval(range(2, 5)) == Interval(2, 4)
    assert as_interval(3) == Interval(3, 3)


RANGES = {i: (0, 8), j: (-5, 5), n: (2**31 - 4, 2**31 - 1)}
leaves = st.one_of(st.sampled_from(list(RANGES)), st.integers(-9, 9).map(const),
                   st.sampled_from([3, 2**30]).map(const))
ops = st.sampled_from(("add", "sub", "mul", "div", "mod", "min", "max", "lt", "le", "eq", "ne"))
exprs = st.recursive(leaves, lambda ch: st.builds(BinaryOp, ops, ch, ch), max_leaves=8)


@given(exprs, st.data())
def test_interval_contains_every_value(expr, data):
    env = {v: data.draw(st.integers(lo, hi - 1)) for v, (lo, hi) in RANGES.items()}
    try:
        value = evaluate_expr(expr, env)
    except EvaluationError:
        assume(False)
    bound = bound_of(expr, RANGES)
    assert bound.lo <= int(value) <= bound.hi, f"{expr} = {value} outside {bound}"
    assert not math.isnan(bound.lo) and not math.isnan(bound.hi)
