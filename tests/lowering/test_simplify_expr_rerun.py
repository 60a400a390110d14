"""The lowering pipeline runs simplify_expr twice; the second run returns a function at
once when it is the first run's own output, unchanged, with the same variables written
(issue 11, session 11). These tests check that it is skipped then, and only then: when
the first run made a variable unwritten, when a node's rewrites hit the guard, and when
a pass in between changed the function, the second run still simplifies."""
from __future__ import annotations

from hidet_framework.ir import (
    AssignStmt, BufferStoreStmt, Constant, DeclareStmt, ForStmt, Function, IfStmt, module, seq, tensor_type, var,
)
from hidet_framework.lowering import simplify_expr
from hidet_framework.lowering.pass_context import PassContext
from hidet_framework.lowering.pipeline import lower
from hidet_framework.lowering.simplify_expr import SimplifyExpr
from hidet_framework.simplifier.simplify import Simplifier


def _run(m):
    return SimplifyExpr().run(m, PassContext())


def _count_simplifiers(monkeypatch) -> list:
    made = []

    class Counting(simplify_expr._SimplifyStmts):
        def __init__(self, written):
            made.append(written)
            super().__init__(written)

    monkeypatch.setattr(simplify_expr, "_SimplifyStmts", Counting)
    return made


def _index(fn):
    store = fn.body.body  # for i: a[index] = ...
    return store.indices[0]


def test_its_own_unchanged_output_is_returned_without_simplifying_again(monkeypatch):
    a, i, j = var("a", tensor_type("float32", [64])), var("i"), var("j")
    fn = Function("f", [a, j], ForStmt(i, 8, BufferStoreStmt(a, ((i * 8 + j) // 8 + (i + 4) - 4,), 1.0)))
    made = _count_simplifiers(monkeypatch)
    once = _run(module("m", [fn])).functions["f"]
    assert len(made) == 1 and once is not fn
    again = _run(module("m", [once])).functions["f"]
    assert again is once and len(made) == 1  # returned as it came: no simplifier made
    # what a second run would have given is that same function
    simplify_expr._RESULTS.clear()
    forced = _run(module("m", [once])).functions["f"]
    assert len(made) == 2 and str(forced) == str(once)


def test_a_variable_the_first_run_made_unwritten_is_bound_in_the_second():
    # x = i; if i > 10: x = 100 (dead: i < 8); a[x / 4]. The first run sees x assigned, so
    # it leaves x unbounded, then drops the dead branch; only a second run knows x < 8.
    a, i = var("a", tensor_type("float32", [64])), var("i")
    x = var("x")
    body = ForStmt(i, 8, seq(DeclareStmt(x, i), IfStmt(i > 10, AssignStmt(x, 100)),
                             BufferStoreStmt(a, (x // 8,), 1.0)))
    once = _run(module("m", [Function("f", [a], body)])).functions["f"]
    store = once.body.body.stmts[-1]
    assert not isinstance(store.indices[0], Constant), once  # x unbounded in the first run
    assert len(once.body.body.stmts) == 2  # the dead assignment is gone
    twice = _run(module("m", [once])).functions["f"]
    assert twice is not once
    index = twice.body.body.stmts[-1].indices[0]
    assert isinstance(index, Constant) and index.value == 0, twice


def test_a_node_stopped_by_the_rewrite_guard_is_simplified_again(monkeypatch):
    monkeypatch.setattr(Simplifier, "max_rewrites", 1)  # (i + 4) - 4 takes two rewrites
    a, i = var("a", tensor_type("float32", [64])), var("i")
    fn = Function("f", [a], ForStmt(i, 8, BufferStoreStmt(a, ((i + 4) - 4,), 1.0)))
    once = _run(module("m", [fn])).functions["f"]
    assert str(_index(once)) != "i", once  # i + (4 - 4): the guard stopped it
    twice = _run(module("m", [once])).functions["f"]
    assert str(_index(twice)) == "i", twice


def test_a_function_changed_between_the_runs_is_simplified_again(monkeypatch):
    # The pipeline: unrolling between the two runs makes new index expressions (0 * 8 + j ...)
    a, i, j = var("a", tensor_type("float32", [64])), var("i"), var("j")
    fn = Function("f", [a, j], ForStmt(i, 4, BufferStoreStmt(a, ((i * 8 + j % 8) // 8,), 1.0), unroll=True))
    made = _count_simplifiers(monkeypatch)
    out = lower(module("m", [fn]), "cpu").functions["f"]
    assert len(made) == 2  # both runs simplified: unrolling changed the function
    text = str(out)
    # the copies' indices folded: (0 * 8 + j % 8) / 8 is 0 (|j % 8| < 8), no `k * 8` is left
    assert "a[0] = 1.0" in text and "* 8" not in text and text.count("+ 8)") == 1, text
