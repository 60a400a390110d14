"""The simplifier recombines a reshape's unravel-then-ravel: (x / c) * c + x % c -> x
and (x / a % b) * a + x % a -> x % (a*b), anywhere in a sum, for every sign of x
(C's truncating division), and leaves look-alikes alone."""
from __future__ import annotations

from hypothesis import given, strategies as st

from hidet_framework.analysis.evaluator import evaluate_expr
from hidet_framework.ir import var
from hidet_framework.simplifier.simplify import same_expr, simplify


def test_reshape_index_becomes_the_flat_index():
    kk, c0, j = var("kk"), var("c0"), var("j")
    t = kk * 3136 + (c0 + j)
    got = simplify(t / 3136 * 3136 + t / 56 % 56 * 56 + t % 56)
    assert same_expr(got, simplify(t))


def test_look_alikes_stay():
    x, y = var("x"), var("y")
    for e in (x / 7 * 7 + x % 6,            # different divisors
              x / 7 * 7 + y % 7,            # different operands
              x / 4 % 3 * 5 + x % 4,        # the multiple is not the inner divisor
              x / 7 * 14 + x % 7):          # twice the quotient
        assert "%" in str(simplify(e)) or "/" in str(simplify(e)), e


@given(st.integers(-10**6, 10**6), st.integers(2, 97), st.integers(2, 97), st.integers(-50, 50))
def test_identities_hold_for_every_sign(value, a, b, extra):
    x = var("x")
    env = {x: value}
    for e in (x / a * a + x % a + extra, extra + x % a + (x / a % b) * a, x % a + (x / a % b) * a):
        got = simplify(e)
        assert evaluate_expr(got, env) == evaluate_expr(e, env), (e, got)
    assert "/" not in str(simplify(x / a * a + x % a))
    assert str(simplify(x % a + x / a % b * a)).count("%") == 1
