"""(x*c + y) / (c*k) -> x / k and % (c*k) -> (x % k)*c + y when 0 <= y < c and
x >= 0: an index divided by the stride of a coarser axis (a reshape after a head
split). Checked by value on sampled points of the bounds, and refused where a part
may be negative, y may reach c, or c does not divide the divisor."""
from __future__ import annotations

from hypothesis import given, strategies as st

from hidet_framework.analysis.evaluator import evaluate_expr
from hidet_framework.ir import var
from hidet_framework.simplifier.simplify import same_expr, simplify


def test_gpt2_head_split_index_collapses():
    h, r, j = var("h"), var("r"), var("j")
    flat = (h * 64 + r) * 128 + j
    bounds = {h: (0, 12), r: (0, 64), j: (0, 128)}
    assert same_expr(simplify(flat / 8192, bounds), h)
    unravel_ravel = (flat / 8192 * 64 + flat / 128 % 64) * 128 + flat % 128
    assert same_expr(simplify(unravel_ravel, bounds), simplify(flat, bounds))


@given(st.integers(2, 64), st.integers(2, 16), st.integers(1, 40), st.integers(0, 10**4), st.data())
def test_values_hold_inside_the_bounds(c, k, y_extent, x_hi, data):
    x, y = var("x"), var("y")
    y_extent = min(y_extent, c)  # 0 <= y < c
    bounds = {x: (0, x_hi + 1), y: (0, y_extent)}
    e = x * c + y
    div, mod = simplify(e / (c * k), bounds), simplify(e % (c * k), bounds)
    assert str(c * k) not in str(div), div  # the divisor went: x / k
    for _ in range(20):
        env = {x: data.draw(st.integers(0, x_hi)), y: data.draw(st.integers(0, y_extent - 1))}
        assert evaluate_expr(div, env) == evaluate_expr(e / (c * k), env), (env, div)
        assert evaluate_expr(mod, env) == evaluate_expr(e % (c * k), env), (env, mod)


def test_refused_where_it_would_be_wrong():
    x, y = var("x"), var("y")
    cases = [
        ((x * 4 + y) / 16, {x: (0, 100), y: (0, 5)}),      # y may reach the stride 4
        ((x * 4 + y) / 16, {x: (-100, 100), y: (0, 4)}),   # x*4 may be negative (truncation)
        ((x * 4 + y) / 16, {x: (0, 100), y: (-1, 4)}),     # y may be negative
        ((x * 6 + y) / 16, {x: (0, 100), y: (0, 6)}),      # gcd(6, 16) = 2 leaves y up to 5 >= 2
    ]
    for e, bounds in cases:
        got = simplify(e, bounds)
        assert "16" in str(got), (e, bounds, got)
        points = [{x: xv, y: yv} for xv in (bounds[x][0], 0, 7, bounds[x][1] - 1)
                  for yv in range(bounds[y][0], bounds[y][1])]
        for env in points:
            assert evaluate_expr(got, env) == evaluate_expr(e, env), (e, env, got)
