"""The simplifier's bound-dependent rules exactly at their boundaries: one step inside
the bound the rule fires, one step outside it must not (and the result always has the
expression's value, checked exhaustively with the evaluator). Written to kill the
boundary mutants of simplifier/ that the rule examples let through (issue 12)."""
from __future__ import annotations

import itertools

import pytest

from hidet_framework.analysis.evaluator import evaluate_expr
from hidet_framework.ir import assert_structural_equal, const, maximum, minimum, var
from hidet_framework.simplifier.simplify import simplify

i, j, m, k = var("i"), var("j"), var("m"), var("k")
BOUNDS = {i: (1, 9), j: (0, 4), m: (-3, 4), k: (0, 8)}  # half-open: j in 0..3, m in -3..3
WIDE = {i: (1, 9), j: (0, 5), m: (-4, 4), k: (0, 8)}    # each one step wider

KEEP = None
# (expression, result under BOUNDS, result under WIDE); KEEP: left as it is
CASES = [
    (j // 4, const(0), KEEP), (j % 4, j, KEEP),                  # |j| < 4 only under BOUNDS
    (m // 4, const(0), KEEP), (m % 4, m, KEEP),                  # negative side: m >= -3
    ((i * 4 + j) // 4, i, i + j // 4), ((i * 4 + j) % 4, j, j % 4),  # j < 4: exact; else split
    (minimum(j, 3), j, KEEP), (maximum(j, 3), const(3), KEEP),
    (minimum(j, 4), j, j), (maximum(j, 4), const(4), const(4)),
    (maximum(m, -3), m, KEEP), (minimum(m, -3), const(-3), KEEP),
    (minimum(j + 3, 3), const(3), const(3)), (maximum(3, j + 3), j + 3, j + 3),  # equal at one end
    (j < 4, const(True), KEEP), (j <= 3, const(True), KEEP), (j >= 0, const(True), const(True)),
    (m < -3, const(False), KEEP), (m >= -3, const(True), KEEP),
]


def _values(expr, bounds, _unused):
    names = [v for v in (i, j, m, k) if v in bounds]
    return {vals: evaluate_expr(expr, dict(zip(names, vals)))
            for vals in itertools.product(*(range(*bounds[v]) for v in names))}


@pytest.mark.parametrize("expr, inside, outside", CASES, ids=[str(c[0]) for c in CASES])
def test_rule_fires_exactly_inside_its_bounds(expr, inside, outside):
    for bounds, want in ((BOUNDS, inside), (WIDE, outside)):
        got = simplify(expr, bounds)
        assert_structural_equal(got, expr if want is KEEP else want)
        assert _values(got, bounds, None) == _values(expr, bounds, None)


@pytest.mark.parametrize("expr", [(i * 4 + m) // 4, (i * 4 + m) % 4, (m + 8) // 4, (k * 2 + 1) // 2,
                                  (i * 8 + j * 2 + 1) % 4, (k - 4) // 4, (k - 4) % 4, (i * 3 + k) // 3,
                                  (i * 3 + k) % 3, (j * 4 - 1) // 4])
def test_split_multiples_keeps_the_value(expr):
    got = simplify(expr, BOUNDS)
    assert _values(got, BOUNDS, None) == _values(expr, BOUNDS, None), got


def test_split_multiples_needs_a_non_negative_rest():
    # i*4 + m may be negative (m >= -3 while i >= 1 makes the sum >= 1, but m alone is not
    # a remainder): the rule must not turn it into i + m / 4
    got = simplify((i * 4 + m) // 4, BOUNDS)
    assert _values(got, BOUNDS, None) == _values((i * 4 + m) // 4, BOUNDS, None)
    assert_structural_equal(simplify((i * 4 + k) // 4, BOUNDS), i + k // 4)
    assert_structural_equal(simplify((i * 4 + k) % 4, BOUNDS), k % 4)


def test_nested_div_mod_boundaries():
    n = var("n")
    assert_structural_equal(simplify((n % 16) % 4), n % 4)
    assert_structural_equal(simplify((n % 6) % 4), (n % 6) % 4)       # 4 does not divide 6
    assert_structural_equal(simplify((n // 4) // 8), n // 32)
    assert_structural_equal(simplify((n // 65536) // 16384), n // 2**30)
    assert_structural_equal(simplify((n // 65536) // 32768), (n // 65536) // 32768)  # 2^31 overflows int32


def test_constant_moves_right_before_bounds_apply():
    assert_structural_equal(simplify(minimum(3, j), BOUNDS), j)
    assert_structural_equal(simplify(minimum(3, j), WIDE), minimum(j, 3))


def test_rules_keep_int64_types():
    """The same rules on int64 operands (and mixed with int32): every result keeps the
    expression's type, and no rule fires across mismatched integer types."""
    from hidet_framework.ir import dtypes
    from hidet_framework.ir.type_infer import infer_type

    a, b = var("a", dtypes.int64), var("b", dtypes.int64)
    bounds = {a: (1, 9), b: (0, 4)}
    for expr in [(a * 4 + b) // 4, (a * 4 + b) % 4, (a * 8) % 4, (a * 8) // 4, (a * 4 - 4) // 4, (a // 4) // 8,
                 (a % 16) % 4, b // 4, b % 4, minimum(b, 3), maximum(b, 3), a * 1, a * 0, a % 1, a + 0,
                 (a * 6 + b * 2) // 2]:
        got = simplify(expr, bounds)
        assert infer_type(got) is dtypes.int64, (expr, got)
        for va in range(1, 9):
            for vb in range(0, 4):
                env = {a: va, b: vb}
                assert evaluate_expr(got, env) == evaluate_expr(expr, env), (expr, got)
    mixed = (a * 4 + j) // 4  # int64 and int32 terms
    got = simplify(mixed, {a: (1, 9), j: (0, 4)})
    for va in range(1, 9):
        for vj in range(0, 4):
            assert evaluate_expr(got, {a: va, j: vj}) == evaluate_expr(mixed, {a: va, j: vj})
