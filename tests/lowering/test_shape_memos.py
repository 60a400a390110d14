"""The memos by shape (issue 11, session 17: `ir.shapes`) must never change a result.

The simplifier and flatten_tensor_index remember a result by what a node is made of
(its class, its own fields, its children after rewriting), so equal subtrees built as
distinct objects are rewritten once and share the result. Checked here: the same
results as without the memo; no result kept across a new bound of its variable; keys
that tell constants apart by value, sign, Python type and dtype; unchanged trees that
keep their identity; and a printer whose text does not depend on that sharing."""
from __future__ import annotations

import random

from hidet_framework.extension import plugin_host
from hidet_framework.ir import (
    BinaryOp, BufferStoreStmt, Cast, Constant, Function, assert_structural_equal, const, dtypes, module,
    pointer_type, seq, tensor_type, var,
)
from hidet_framework.ir.printer import format_ir
from hidet_framework.lowering.flatten_tensor_index import FlattenTensorIndex
from hidet_framework.lowering.pass_context import PassContext
from hidet_framework.simplifier import simplify as simplify_module
from hidet_framework.simplifier.simplify import Simplifier


def _index(rng: random.Random, leaves: list, depth: int):
    """A random integer index expression (a new object each call, also for equal shapes)."""
    if depth == 0 or rng.random() < 0.2:
        leaf = rng.choice(leaves)
        return const(leaf) if isinstance(leaf, int) else leaf
    op = rng.choice(["add", "sub", "mul", "div", "mod", "min", "max", "add", "mul"])
    a = _index(rng, leaves, depth - 1)
    b = const(rng.choice([1, 2, 3, 4, 8, 16, 32])) if op in ("div", "mod", "mul") else _index(rng, leaves, depth - 1)
    return BinaryOp(op, a, b)


def _simplify_all(exprs: list, bounds: dict) -> list:
    s = Simplifier(bounds)
    return [s.simplify(e) for e in exprs]


def test_results_equal_those_without_the_memo(monkeypatch):
    i, j, k = var("i"), var("j"), var("k")
    bounds = {i: (0, 32), j: (0, 8), k: (0, 4)}
    exprs = []
    for seed in range(40):  # each shape built twice, as distinct objects
        for _ in range(2):
            exprs.append(_index(random.Random(seed), [i, j, k, 0, 1, 4, 8, 64], 5))
    with_memo = _simplify_all(exprs, bounds)
    monkeypatch.setattr(simplify_module, "visitor_of", lambda *args: None)  # every node by the rules
    without = _simplify_all(exprs, bounds)
    assert [format_ir(e) for e in with_memo] == [format_ir(e) for e in without]
    pairs = zip(with_memo[0::2], with_memo[1::2], exprs[0::2])
    assert any(a is b and a is not e for a, b, e in pairs), "equal rewritten trees share one result"


def test_no_result_survives_a_new_bound_of_its_variable():
    s, i = Simplifier(), var("i")
    s.bind(i, (0, 8))
    assert isinstance(s.simplify(i // 8), Constant)  # i in [0, 7]: 0
    s.bind(i, (0, 100))  # i was seen: what was learnt under the old bound is dropped
    again = s.simplify(i // 8)  # a new node of the same shape
    assert not isinstance(again, Constant), again


def test_constants_are_told_apart_by_dtype_and_sign():
    s = Simplifier()
    narrow = s.simplify(BinaryOp("add", Constant(200, dtypes.uint8), Constant(100, dtypes.uint8)))
    wide = s.simplify(BinaryOp("add", Constant(200, dtypes.int32), Constant(100, dtypes.int32)))
    assert (narrow.value, narrow.dtype, wide.value, wide.dtype) == (44, dtypes.uint8, 300, dtypes.int32)
    negative = s.simplify(Cast(const(-0.0), dtypes.float64))
    positive = s.simplify(Cast(const(0.0), dtypes.float64))
    assert str(negative.value) == "-0.0" and str(positive.value) == "0.0"


def test_an_unchanged_tree_with_repeated_shapes_comes_back_as_itself():
    x, y = var("x", "float32"), var("y", "float32")
    e = (x * y + x * y) * (x * y + x * y)  # no rule applies to float arithmetic of variables
    assert Simplifier().simplify(e) is e


def _run(pass_, params, body):
    return pass_.run(module("m", [Function("f", params, body)]), PassContext()).functions["f"]


def test_flatten_builds_each_offset_once_and_keeps_what_it_does_not_touch():
    a, i, j = var("a", tensor_type("float32", [6, 8])), var("i"), var("j")
    out = _run(FlattenTensorIndex(), (a, i, j), BufferStoreStmt(a, (i, j), a[i, j] * a[i, j]))
    store = out.body
    assert_structural_equal(store.indices[0], i * 8 + j)
    assert store.indices[0] is store.value.a.indices[0] is store.value.b.indices[0]
    p = var("p", pointer_type("float32"))
    body = seq(BufferStoreStmt(p, (i,), p[i] + p[i]), BufferStoreStmt(p, (i + 1,), p[i + 1] * p[i]))
    assert _run(FlattenTensorIndex(), (p, i), body).body is body  # nothing to flatten: not an equal copy


def test_a_shared_operand_prints_as_distinct_ones_would():
    x, y, out = (var(n, pointer_type("float32")) for n in ("x", "y", "out"))
    t = x[0] - y[0]
    shared = BinaryOp("sub", t, t)
    distinct = BinaryOp("sub", x[0] - y[0], x[0] - y[0])
    backend = plugin_host().backend_for("cpu")
    target = backend.detect_target()

    def source(value):
        fn = Function("f", (x, y, out), BufferStoreStmt(out, (0,), value), kind="public")
        text = backend.codegen(module("m", [fn]), target)
        return text[text.index("/* hidet function"):]

    assert source(shared) == source(distinct)
    assert "x[0] - y[0] - (x[0] - y[0])" in source(shared)
