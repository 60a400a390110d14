"""Before/expected tests of each lowering pass, compared structurally."""
from __future__ import annotations

import pytest

from hidet_framework.ir import (
    Address, AssertStmt, BufferStoreStmt, Call, DeclareStmt, EvaluateStmt, ForStmt, Function,
    IfStmt, LetStmt, SeqStmt, assert_structural_equal, const, if_then_else, logical_and,
    logical_not, logical_or, module, seq, tensor_type, var,
)
from hidet_framework.mapping.layout import column_major
from hidet_framework.lowering.flatten_tensor_index import FlattenTensorIndex
from hidet_framework.lowering.flatten_tensor_slice import FlattenTensorSlice
from hidet_framework.lowering.insert_bounds_check import InsertBoundsCheck
from hidet_framework.lowering.pass_context import PassContext
from hidet_framework.lowering.simplify_expr import SimplifyExpr
from hidet_framework.lowering.unroll_loops import UnrollLoops
from hidet_framework.lowering.verify_ir import verify_ir

F32_6x8 = tensor_type("float32", [6, 8])


def run(pass_, params, body, **config):
    fn = Function("f", params, body)
    out = pass_.run(module("m", [fn]), PassContext(config=config)).functions["f"]
    verify_ir(out)
    return out


def expect(params, body):
    return Function("f", params, body)


# ------------------------------------------------------------ flatten_tensor_slice

def test_slice_element_composes_indices():
    a, i, k = var("a", F32_6x8), var("i"), var("k")
    got = run(FlattenTensorSlice(), (a, i, k), EvaluateStmt(a[2:6, i][k]))
    assert_structural_equal(got, expect((a, i, k), EvaluateStmt(a[const(2) + k, i])))


def test_slice_of_slice_and_store():
    a, i, k = var("a", F32_6x8), var("i"), var("k")
    got = run(FlattenTensorSlice(), (a, i, k), BufferStoreStmt(a[1:, :][i, 2:], (k,), 1.0))
    assert_structural_equal(got, expect((a, i, k), BufferStoreStmt(a, (const(1) + i, const(2) + k), 1.0)))


def test_slice_argument_becomes_first_element_address():
    a, i = var("a", F32_6x8), var("i")
    got = run(FlattenTensorSlice(), (a, i), EvaluateStmt(Call("g", (a[i, 3:],))))
    assert_structural_equal(got, expect((a, i), EvaluateStmt(Call("g", (Address(a[i, const(3)]),)))))


def test_slice_without_slices_is_unchanged():
    a, i = var("a", F32_6x8), var("i")
    body = EvaluateStmt(a[i, i])
    assert run(FlattenTensorSlice(), (a, i), body).body is body


# ------------------------------------------------------------ flatten_tensor_index

def test_row_major_offsets():
    a, i, j = var("a", F32_6x8), var("i"), var("j")
    got = run(FlattenTensorIndex(), (a, i, j), BufferStoreStmt(a, (i, j), a[j, i]))
    assert_structural_equal(got, expect((a, i, j), BufferStoreStmt(a, (i * 8 + j,), a[(j * 8 + i,)])))


def test_layout_of_the_type_is_used_and_pointers_stay():
    c = var("c", tensor_type("float32", [6, 8], column_major(6, 8)))
    p, i, j = var("p", "float32"), var("i"), var("j")
    from hidet_framework.ir import pointer_type
    p = var("p", pointer_type("float32"))
    got = run(FlattenTensorIndex(), (c, p, i, j), BufferStoreStmt(p, (i,), c[i, j]))
    assert_structural_equal(got, expect((c, p, i, j), BufferStoreStmt(p, (i,), c[(i + j * 6,)])))


def test_flatten_is_idempotent_and_rank1_identity_kept():
    v, i = var("v", tensor_type("int32", [5])), var("i")
    body = BufferStoreStmt(v, (i,), v[i])
    once = run(FlattenTensorIndex(), (v, i), body)
    assert once.body is body


# ------------------------------------------------------------ simplify_expr

def test_simplify_uses_loop_bounds():
    a, i, j = var("a", F32_6x8), var("i"), var("j")
    before = ForStmt(i, 6, ForStmt(j, 8, BufferStoreStmt(a, (((i * 8 + j) // 8) + 0, (i * 8 + j) % 8), 1.0)))
    after = ForStmt(i, 6, ForStmt(j, 8, BufferStoreStmt(a, (i, j), 1.0)))
    assert_structural_equal(run(SimplifyExpr(), (a,), before), expect((a,), after))


def test_simplify_uses_let_bounds_and_drops_proven_asserts_and_branches():
    a, i, x = var("a", F32_6x8), var("i"), var("x")
    before = ForStmt(i, 6, LetStmt(x, i % 4, seq(
        AssertStmt(x < 4, "x in range"),
        IfStmt(x < 5, BufferStoreStmt(a, (i, x), 1.0), BufferStoreStmt(a, (i, const(0)), 2.0)))))
    after = ForStmt(i, 6, LetStmt(x, i % 4, SeqStmt((BufferStoreStmt(a, (i, x), 1.0),))))
    assert_structural_equal(run(SimplifyExpr(), (a,), before), expect((a,), after))


def test_simplify_bounds_a_variable_declared_once():
    # scripts declare every local (``r = i % 4``): one never written again bounds like a let
    a, i, r = var("a", F32_6x8), var("i"), var("r")
    before = ForStmt(i, 6, seq(DeclareStmt(r, i % 4), BufferStoreStmt(a, (i, r // 4 + r), 1.0)))
    after = ForStmt(i, 6, seq(DeclareStmt(r, i % 4), BufferStoreStmt(a, (i, r), 1.0)))
    assert_structural_equal(run(SimplifyExpr(), (a,), before), expect((a,), after))


@pytest.mark.parametrize("write", ["assign", "address"])
def test_simplify_leaves_a_declared_variable_that_is_written_again_unbounded(write):
    from hidet_framework.ir import AssignStmt

    a, i, r = var("a", F32_6x8), var("i"), var("r")
    again = AssignStmt(r, r + 8) if write == "assign" else EvaluateStmt(Call("touch", (Address(r),), "int32"))
    body = ForStmt(i, 6, seq(DeclareStmt(r, i % 4), again, BufferStoreStmt(a, (i, r // 4 + r), 1.0)))
    store = run(SimplifyExpr(), (a,), body).body.body.stmts[2]
    assert "/" in str(store.indices[1]), store  # r may be 8..11 here: r / 4 stays


# ------------------------------------------------------------ unroll_loops

def test_full_unroll_with_fresh_declarations():
    a, i, t = var("a", F32_6x8), var("i"), var("t", "float32")
    before = ForStmt(i, 2, seq(DeclareStmt(t, a[0, i]), BufferStoreStmt(a, (const(1), i), t)), unroll=True)
    t0, t1 = var("t", "float32"), var("t", "float32")
    after = SeqStmt((
        SeqStmt((DeclareStmt(t0, a[0, const(0)]), BufferStoreStmt(a, (const(1), const(0)), t0))),
        SeqStmt((DeclareStmt(t1, a[0, const(1)]), BufferStoreStmt(a, (const(1), const(1)), t1))),
    ))
    got = run(UnrollLoops(), (a,), before)
    assert_structural_equal(got, expect((a,), after))
    assert got.body.stmts[0].stmts[0].var is not got.body.stmts[1].stmts[0].var


def test_unroll_by_factor_with_remainder():
    a, i = var("a", F32_6x8), var("i")
    before = ForStmt(i, 5, BufferStoreStmt(a, (const(0), i), 1.0), unroll=2)
    o = var("i_o")
    after = SeqStmt((
        ForStmt(o, 2, SeqStmt((BufferStoreStmt(a, (const(0), o * 2 + 0), 1.0), BufferStoreStmt(a, (const(0), o * 2 + 1), 1.0)))),
        BufferStoreStmt(a, (const(0), const(4)), 1.0),
    ))
    assert_structural_equal(run(UnrollLoops(), (a,), before), expect((a,), after))


@pytest.mark.parametrize("config", [{}, {"unroll": False}])
def test_symbolic_extent_keeps_the_hint(config):
    a, i, n = var("a", F32_6x8), var("i"), var("n")
    before = ForStmt(i, n, BufferStoreStmt(a, (const(0), i), 1.0), unroll=True)
    assert run(UnrollLoops(), (a, n), before, **config).body is before


def test_statement_budget_keeps_long_unrolls_a_loop():
    """copies x body statements past ``max_unroll_statements``: a plain loop (no hint)."""
    a, i = var("a", F32_6x8), var("i")
    body = seq(*[BufferStoreStmt(a, (const(k % 6), i), 1.0) for k in range(4)])  # a SeqStmt and 4 stores
    before = ForStmt(i, 8, body, unroll=True)
    kept = run(UnrollLoops(), (a,), before, max_unroll_statements=39).body
    assert isinstance(kept, ForStmt) and kept.unroll is None and kept.body is body
    expanded = run(UnrollLoops(), (a,), before, max_unroll_statements=40).body
    assert isinstance(expanded, SeqStmt) and len(expanded.stmts) == 8
    by_factor = run(UnrollLoops(), (a,), ForStmt(i, 1000, body, unroll=4), max_unroll_statements=20).body
    assert isinstance(by_factor, ForStmt) and by_factor.extent.value == 250  # 4 copies x 5 fit


# ------------------------------------------------------------ insert_bounds_check

def _in_range(index, extent):
    return logical_and(const(0) <= index, index < const(extent))


def test_bounds_check_names_tensor_and_dimension():
    a, i, j = var("a", F32_6x8), var("i"), var("j")
    store = BufferStoreStmt(a, (i, j + 1), 1.0)
    got = run(InsertBoundsCheck(), (a, i, j), store, bounds_check=True)
    after = SeqStmt((
        AssertStmt(_in_range(i, 6), "a: index 0 = i out of range [0, 6)"),
        AssertStmt(_in_range(j + 1, 8), "a: index 1 = (j + 1) out of range [0, 8)"),
        store,
    ))
    assert_structural_equal(got, expect((a, i, j), after))


def test_guarded_access_is_checked_under_its_guard():
    a, i = var("a", tensor_type("float32", [4])), var("i")
    load = if_then_else(i < 4, a[i], 0.0)
    got = run(InsertBoundsCheck(), (a, i), EvaluateStmt(load), bounds_check=True)
    cond = logical_or(logical_not(logical_and(i < 4)), _in_range(i, 4))
    assert_structural_equal(got, expect((a, i), SeqStmt((AssertStmt(cond, "a: index 0 = i out of range [0, 4)"),
                                                         EvaluateStmt(load)))))


def test_bounds_check_off_by_default():
    a, i = var("a", F32_6x8), var("i")
    body = EvaluateStmt(a[i, i])
    assert run(InsertBoundsCheck(), (a, i), body).body is body


def test_flattened_access_checks_the_offset():
    a, k = var("a", F32_6x8), var("k")
    got = run(InsertBoundsCheck(), (a, k), EvaluateStmt(a[(k,)]), bounds_check=True)
    assert_structural_equal(got.body.stmts[0], AssertStmt(_in_range(k, 48), "a: flat offset = k out of range [0, 48)"))
