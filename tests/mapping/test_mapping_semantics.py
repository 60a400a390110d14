"""Index helpers and swizzle defaults at their edges (hidet_framework/mapping/layout.py):
dividing the constant 1 by a symbolic extent, the default swizzle period (the largest
power of two dividing the column blocks), and the periods a swizzle refuses. Written
against survivors of the mapping group's full mutation run (issue 12)."""
from __future__ import annotations

import pytest

from hidet_framework.analysis.evaluator import evaluate_expr
from hidet_framework.ir import var
from hidet_framework.mapping.layout import index_div, row_major, swizzle


def test_dividing_a_constant_by_a_symbolic_extent():
    n = var("n")
    for a in (0, 1, 2, 7):
        q = index_div(a, n)
        for value in (1, 2, 4, 9):
            got = q if isinstance(q, int) else evaluate_expr(q, {n: value})
            assert got == a // value, (a, value)


@pytest.mark.parametrize("cols,vector,period", [(16, 1, 16), (24, 1, 8), (24, 2, 4), (48, 4, 4), (40, 1, 8),
                                                (8, 8, 1)])
def test_the_default_period_is_the_largest_power_of_two_dividing_the_blocks(cols, vector, period):
    s = swizzle(row_major(8, cols), vector=vector)
    assert s.period == period
    if vector == 1:
        assert swizzle(row_major(8, cols)).period == period      # vector 1 is the default


@pytest.mark.parametrize("period", [0, -2, 3, 6])
def test_periods_that_are_not_powers_of_two_are_refused(period):
    with pytest.raises(ValueError):
        swizzle(row_major(8, 24), vector=1, period=period)       # 24 blocks: 3 and 6 divide them
