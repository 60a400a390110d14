"""The simplifier's memos (issue 11, session 10) must never change a result: a result
memoised under one bound of a variable is dropped when that variable is bound again,
and purity memoised per subtree still sees an effectful call however deep or shared."""
from __future__ import annotations

from hidet_framework.ir.dtypes import int32
from hidet_framework.ir import BufferStoreStmt, Call, Constant, ForStmt, Function, module, seq, tensor_type, var
from hidet_framework.lowering.pass_context import PassContext
from hidet_framework.lowering.simplify_expr import SimplifyExpr
from hidet_framework.simplifier.purity import Purity
from hidet_framework.simplifier.simplify import Simplifier, is_pure


def _simplified(body, *params):
    fn = Function("f", params, body)
    return SimplifyExpr().run(module("m", [fn]), PassContext()).functions["f"].body


def test_a_shared_expression_is_simplified_again_when_its_variable_is_bound_again():
    a, i = var("a", tensor_type("float32", [16])), var("i")
    e = i // 4  # one object, in two loops over the same variable with different extents
    out = _simplified(seq(ForStmt(i, 4, BufferStoreStmt(a, (e,), 1.0)),
                          ForStmt(i, 8, BufferStoreStmt(a, (e + 8,), 2.0))), a)
    first, second = out.stmts[0].body, out.stmts[1].body
    assert isinstance(first.indices[0], Constant) and first.indices[0].value == 0  # i in [0, 3]
    assert not isinstance(second.indices[0], Constant), second  # i in [0, 7]: i / 4 + 8 stays
    assert "/" in str(second.indices[0]), second


def test_binding_a_new_variable_keeps_earlier_results_and_bounds_the_new_one():
    s, i, j = Simplifier(), var("i"), var("j")
    s.bind(i, (0, 4))
    e = (i + 4) // 8
    assert isinstance(s.simplify(e), Constant)
    s.bind(j, (0, 2))  # j was never seen: nothing memoised depends on it
    assert s.simplify(e) is s.simplify(e)
    assert isinstance(s.simplify(j // 2), Constant)
    s.bind(i, (0, 100))  # i was seen: its results are computed again under the new bound
    assert not isinstance(s.simplify(e), Constant)


def test_purity_memo_sees_an_effectful_call_at_any_depth_and_when_shared():
    i = var("i")
    pure = (i + 1) * 3
    touch = Call("touch", (i,), int32)  # no primitive: may have an effect
    p = Purity()
    assert p.check(pure)
    mixed = pure + touch
    assert not p.check(mixed)
    assert p.check(pure)  # the impure parent did not taint its pure child's entry
    assert not p.check(mixed * 2)  # an impure child found in the memo makes the parent impure
    assert not p.check((pure - (mixed * 2)) // 5)
    for e in (pure, mixed, mixed * 2, (pure - (mixed * 2)) // 5):
        assert p.check(e) == is_pure(e)


def test_a_product_with_zero_keeps_an_effectful_factor():
    i = var("i")
    touch = Call("touch", (i,), int32)
    s = Simplifier({i: (0, 10)})
    assert isinstance(s.simplify((i + 1) * 0), Constant)
    kept = s.simplify((touch + 1) * 0)
    assert not isinstance(kept, Constant) and "touch" in str(kept)
