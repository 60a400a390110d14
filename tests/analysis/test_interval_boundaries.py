"""Interval bounds at their boundaries: each operator's interval is the tight one on
small exact inputs (found exhaustively with the evaluator), and sound. Written to kill
the mutants of analysis/bounds.py that the rule examples let through (issue 12)."""
from __future__ import annotations

import itertools

import pytest

from hidet_framework.analysis.bounds import INF, Interval, bound_of
from hidet_framework.analysis.evaluator import evaluate_expr
from hidet_framework.ir import BinaryOp, const, maximum, minimum, var

x, y = var("x"), var("y")

# (x range, y range) half-open, as the simplifier's callers give them
RANGES = [((0, 4), (4, 5)), ((0, 5), (4, 5)), ((-5, 0), (4, 5)), ((-2, 6), (3, 4)), ((0, 11), (-4, -3)),
          ((-7, 8), (2, 3)), ((1, 6), (-2, 0)), ((-3, 3), (-3, 4)), ((3, 4), (3, 4)), ((0, 3), (5, 9)),
          ((0, 5), (0, 4)), ((0, 5), (-3, 1)), ((2, 6), (1, 4)), ((-5, 2), (4, 5))]
OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "div": lambda a, b: a // b, "mod": lambda a, b: a % b, "min": minimum, "max": maximum,
       "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "eq": lambda a, b: BinaryOp("eq", a, b),
       "ne": lambda a, b: BinaryOp("ne", a, b)}


def _exact(expr, xr, yr):
    values = [int(evaluate_expr(expr, {x: a, y: b})) for a, b in itertools.product(range(*xr), range(*yr))
              if not (b == 0 and expr.op in ("div", "mod"))]
    return Interval(min(values), max(values))


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("xr, yr", RANGES)
def test_interval_is_sound(op, xr, yr):
    expr = OPS[op](x, y)
    if op in ("div", "mod") and yr[0] <= 0 < yr[1]:
        assert bound_of(expr, {x: xr, y: yr}) == Interval.unbounded()  # a divisor that may be 0
        return
    got, exact = bound_of(expr, {x: xr, y: yr}), _exact(expr, xr, yr)
    assert got.lo <= exact.lo and exact.hi <= got.hi, (got, exact)


# (expression, x range, y range, the interval bound_of must give: tight at the boundary)
TIGHT = [
    (x + y, (0, 4), (4, 5), Interval(4, 7)), (x - y, (0, 4), (4, 5), Interval(-4, -1)),
    (x * y, (-2, 6), (3, 4), Interval(-6, 15)), (minimum(x, y), (0, 4), (4, 5), Interval(0, 3)),
    (maximum(x, y), (0, 4), (4, 5), Interval(4, 4)),
    (x // y, (-7, 8), (2, 3), Interval(-3, 3)), (x // y, (1, 6), (-2, 0), Interval(-5, 0)),
    (x % y, (0, 4), (4, 5), Interval(0, 3)),        # every x < y: x % y == x
    (x % y, (0, 5), (4, 5), Interval(0, 3)),        # x == y possible: [0, y - 1]
    (x % y, (0, 3), (5, 9), Interval(0, 2)),        # x below the smallest divisor
    (x % y, (-5, 0), (4, 5), Interval(-3, 0)),      # C: the sign of x
    (x % y, (-2, 6), (3, 4), Interval(-2, 2)), (x % y, (0, 11), (-4, -3), Interval(0, 3)),
    (x % y, (0, 5), (1, 4), Interval(0, 2)),        # a divisor of exactly 1 is still positive
    (x % y, (-5, 2), (4, 5), Interval(-3, 1)),      # x reaches 1: not the non-positive case
    (x // y, (2, 6), (1, 4), Interval(0, 5)),       # dividing by exactly 1 keeps the sign
    (x < y, (0, 4), (4, 5), Interval(1, 1)), (x < y, (0, 5), (4, 5), Interval(0, 1)),
    (x <= y, (0, 5), (4, 5), Interval(1, 1)), (x <= y, (0, 6), (4, 5), Interval(0, 1)),
    (x < y, (4, 6), (4, 5), Interval(0, 0)), (x <= y, (5, 7), (4, 5), Interval(0, 0)),
    (BinaryOp("eq", x, y), (3, 4), (3, 4), Interval(1, 1)), (BinaryOp("eq", x, y), (0, 3), (3, 4), Interval(0, 0)),
    (BinaryOp("eq", x, y), (0, 4), (3, 4), Interval(0, 1)), (BinaryOp("ne", x, y), (0, 3), (3, 4), Interval(1, 1)),
    (BinaryOp("ne", x, y), (3, 4), (3, 4), Interval(0, 0)), (BinaryOp("ne", x, y), (3, 5), (3, 4), Interval(0, 1)),
]


@pytest.mark.parametrize("expr, xr, yr, want", TIGHT, ids=[f"{t[0]} x{t[1]} y{t[2]}" for t in TIGHT])
def test_interval_is_tight_at_the_boundary(expr, xr, yr, want):
    assert bound_of(expr, {x: xr, y: yr}) == want
    assert _exact(expr, xr, yr) == want  # the expected value is the true range


def test_sums_that_may_wrap_their_type_are_unbounded():
    assert bound_of(x + 1, {x: (0, 2**31 - 1)}) == Interval(1, 2**31 - 1)
    assert bound_of(x + 2, {x: (0, 2**31 - 1)}) == Interval.unbounded()
    assert bound_of(x * 2, {x: (-(2**30), 2**30)}) == Interval(-(2**31), 2**31 - 2)
    assert bound_of(x * 2, {x: (-(2**30) - 1, 2**30)}) == Interval.unbounded()


def test_interval_helpers():
    assert Interval(2, 5).within(2, 5) and not Interval(2, 5).within(3, 5) and not Interval(2, 5).within(2, 4)
    assert Interval.point(3).is_point() and not Interval(3, 4).is_point() and not Interval(-INF, -INF).is_point()
    assert Interval(0, 1).is_bounded() and not Interval(0, INF).is_bounded() and not Interval(-INF, 0).is_bounded()
    assert Interval(0, 2).union(Interval(-1, 1)) == Interval(-1, 2)
    assert bound_of(x, {x: range(3, 7)}) == Interval(3, 6) and bound_of(x, {x: 4}) == Interval(4, 4)
    assert bound_of(const(7)) == Interval(7, 7)
