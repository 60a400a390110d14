"""The arithmetic simplifier: examples of each rule, and the property that simplifying
never changes an expression's value under the evaluator."""
from __future__ import annotations

import pytest
from hypothesis import assume, given, strategies as st

from hidet_framework.ir import (
    BinaryOp, Call, IfThenElse, UnaryOp, assert_structural_equal, const, if_then_else, logical_and,
    logical_or, maximum, minimum, var,
)
from hidet_framework.analysis.evaluator import EvaluationError, evaluate_expr
from hidet_framework.simplifier.simplify import same_expr, simplify

i, j, k, n = var("i"), var("j"), var("k"), var("n")
BOUNDS = {i: (0, 16), j: (0, 4), k: (0, 8)}

# (before, expected) pairs, simplified under BOUNDS
CASES = [
    (const(2) + const(3) * 4, const(14)),
    (const(-7) // 2, const(-3)),                 # C truncation, like the evaluator
    (const(-7) % 2, const(-1)),
    (n + 0, n), (n * 1, n), (n * 0, const(0)), (n - n, const(0)), (n // 1, n), (n % 1, const(0)),
    (minimum(n, n), n), (maximum(n, n), n),
    (3 + n, n + 3), (4 * n, n * 4),
    ((n + 2) + 3, n + 5), ((n - 2) + 3, n + 1), ((n + 2) - 5, n - 3), ((n * 2) * 4, n * 8),
    ((n + 1) + (k + 2), (n + k) + 3),
    ((n + 1) * 4, n * 4 + 4),
    ((i * 4 + j) // 4, i), ((i * 4 + j) % 4, j),
    ((j + i * 4) // 4, i), ((j + i * 4) % 4, j),
    (j // 4, const(0)), (j % 4, j),
    ((n // 4) // 8, n // 32),
    ((n % 16) % 4, n % 4),
    ((i * 8 + j * 2 + 1) // 4, i * 2 + j // 2),  # (2j + 1) / 4 == j / 2: the stride 2 divides 4
    (i < 16, const(True)), (i < 15, i < 15), (i >= 0, const(True)), (i < n, i < n),
    (minimum(j, 4), j), (maximum(j, 4), const(4)), (maximum(j, k + 4), k + 4),
    (logical_and(True, i < n), i < n), (logical_and(i < n, False), const(False)),
    (logical_or(False, i < n), i < n), (logical_or(True, i < n), const(True)),
    (if_then_else(const(True), i, j), i), (if_then_else(i < n, j, j), j),
    (if_then_else(i < 16, i, j), i),
    (UnaryOp("not", i < n), n <= i),
]


@pytest.mark.parametrize("before, expected", CASES, ids=[str(c[0]) for c in CASES])
def test_rule_examples(before, expected):
    assert_structural_equal(simplify(before, BOUNDS), expected)


def test_unbounded_div_mod_is_kept():
    # n may be negative: truncation makes (n*4 + 3) / 4 differ from n for n < 0
    e = (n * 4 + 3) // 4
    assert same_expr(simplify(e), e)
    assert_structural_equal(simplify(e, {n: (0, 100)}), n)


def test_wrapping_blocks_bound_rules():
    # i * 2**30 wraps in int32, so (i * 2**30 + j) / 2**30 is not i
    e = (i * 2**30 + j) // 2**30
    assert not same_expr(simplify(e, BOUNDS), i)


def test_calls_are_never_dropped():
    call = Call("side_effect", (), ret_type=const(0).dtype)
    assert same_expr(simplify(call * 0), call * 0)
    assert same_expr(simplify(call - call), call - call)


def test_primitive_bounds_are_used():
    from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive

    lane = register_primitive(PrimitiveFunction("test_simplify_lane", "int32", bounds=(0, 32)))
    assert_structural_equal(simplify(lane() // 32), const(0))
    assert_structural_equal(simplify(lane() < 32), const(True))


def test_float_constants_fold_but_float_identities_do_not_apply():
    x = var("x", "float32")
    assert_structural_equal(simplify(const(1.5) + const(2.0)), const(3.5))
    assert same_expr(simplify(x + 0.0), x + 0.0)  # -0.0 + 0.0 is +0.0: not an identity


def test_division_by_zero_is_left_for_run_time():
    e = const(1) // const(0)
    assert same_expr(simplify(e), e)


def test_narrow_types_keep_the_result_type():
    x8 = var("x8", "int8")
    out = simplify(x8 + 0)  # int8 + int32 is an int32
    from hidet_framework.ir import infer_type
    assert infer_type(out) is infer_type(x8 + 0)


# ------------------------------------------------------------------ property tests

a, b, c, big = var("a"), var("b"), var("c"), var("big")
VAR_RANGES = {a: (0, 8), b: (0, 5), c: (-4, 4), big: (2**31 - 6, 2**31 - 1)}

leaves = st.one_of(
    st.sampled_from(list(VAR_RANGES)),
    st.integers(-9, 9).map(const),
    st.sampled_from([1, 2, 4, 8, 16, 2**30, 2**31 - 1]).map(const),
)


def _extend(children):
    arith = st.builds(BinaryOp, st.sampled_from(("add", "sub", "mul", "div", "mod", "min", "max")),
                      children, children)
    compare = st.builds(BinaryOp, st.sampled_from(("lt", "le", "eq", "ne")), children, children)
    select = st.builds(IfThenElse, compare, children, children)
    return st.one_of(arith, arith, arith, select, st.builds(UnaryOp, st.just("neg"), children))


int_exprs = st.recursive(leaves, _extend, max_leaves=10)
comparisons = st.builds(BinaryOp, st.sampled_from(("lt", "le", "eq", "ne")), int_exprs, int_exprs)
bool_exprs = st.recursive(
    comparisons,
    lambda ch: st.one_of(st.builds(BinaryOp, st.sampled_from(("and", "or")), ch, ch),
                         st.builds(UnaryOp, st.just("not"), ch)),
    max_leaves=4)


@st.composite
def assignments(draw):
    return {v: draw(st.integers(lo, hi - 1)) for v, (lo, hi) in VAR_RANGES.items()}


def _value(e, env):
    try:
        return evaluate_expr(e, env)
    except EvaluationError:
        return "error"


@given(st.one_of(int_exprs, bool_exprs), assignments())
def test_simplify_preserves_value(expr, env):
    before = _value(expr, env)
    assume(before != "error")  # division by zero in the original: nothing to preserve
    after = _value(simplify(expr, VAR_RANGES), env)
    assert before == after, f"{expr} -> {simplify(expr, VAR_RANGES)} at {env}"


@given(int_exprs, assignments())
def test_simplify_without_bounds_preserves_value(expr, env):
    before = _value(expr, env)
    assume(before != "error")
    assert _value(simplify(expr), env) == before


@given(int_exprs)
def test_simplify_is_idempotent(expr):
    once = simplify(expr, VAR_RANGES)
    assert same_expr(simplify(once, VAR_RANGES), once)
