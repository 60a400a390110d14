"""The DSL's output compared node for node with hand-built IR."""
from __future__ import annotations

from hidet_framework.ir import dtypes
from hidet_framework.ir.equality import assert_structural_equal
from hidet_framework.ir.expr import Call, IfThenElse, Var, const, equal
from hidet_framework.ir.func import Function
from hidet_framework.ir.stmt import (
    AssignStmt, BufferStoreStmt, DeclareStmt, ForMappingStmt, ForStmt, IfStmt, ReturnStmt, seq,
)
from hidet_framework.ir.types import Scope, TensorType
from hidet_framework.lang import attrs, f32, grid, i32, parallel, script, shared_tensor


def test_vector_add_matches_hand_built_ir():
    n = 64

    @script
    def add(a: f32[n], b: f32[n], c: f32[n]):
        attrs.func_kind = "cpu_kernel"
        for i in parallel(n):
            c[i] = a[i] + b[i]

    t = TensorType(dtypes.float32, (64,))
    a, b, c, i = Var("a", t), Var("b", t), Var("c", t), Var("i", dtypes.int32)
    expected = Function("add", (a, b, c), ForStmt(i, 64, BufferStoreStmt(c, (i,), a[i] + b[i]), parallel=True),
                        "cpu_kernel")
    assert_structural_equal(add.ir, expected)


def test_grid_declare_assign_and_if_match_hand_built_ir():
    @script
    def f(m: i32, x: f32[m, 4]) -> f32:
        acc = 0.0
        for i, j in grid(m, 4):
            if i == j:
                acc += x[i, j]
        return acc

    m = Var("m", dtypes.int32)
    x = Var("x", TensorType(dtypes.float32, (m, 4)))
    acc, i, j = Var("acc", dtypes.float32), Var("i", dtypes.int32), Var("j", dtypes.int32)
    loop = ForStmt(i, m, ForStmt(j, 4, IfStmt(equal(i, j), AssignStmt(acc, acc + x[i, j]))))
    expected = Function("f", (m, x), seq(DeclareStmt(acc, const(0.0)), loop, ReturnStmt(acc)),
                        "public", dtypes.float32)
    assert_structural_equal(f.ir, expected)


def test_mapping_loop_and_shared_tensor_match_hand_built_ir():
    from hidet_framework.mapping.task_mapping import spatial

    mapping = spatial(4, 8)

    class Worker:
        idx = Call("test_lang_worker_index", (), dtypes.int32)

    @script
    def f(out: f32[4, 8]):
        smem = shared_tensor(f32, [4, 8])
        for r, s in mapping.on(Worker.idx):
            smem[r, s] = 1.0 if r < s else 2.0
            out[r, s] = smem[r, s]

    out = Var("out", TensorType(dtypes.float32, (4, 8)))
    smem = Var("smem", TensorType(dtypes.float32, (4, 8)))
    r, s = Var("r", dtypes.int32), Var("s", dtypes.int32)
    body = seq(BufferStoreStmt(smem, (r, s), IfThenElse(r < s, const(1.0), const(2.0))),
               BufferStoreStmt(out, (r, s), smem[r, s]))
    expected = Function("f", (out,), seq(DeclareStmt(smem, None, Scope.SHARED),
                                         ForMappingStmt((r, s), mapping, Worker.idx, body)))
    assert_structural_equal(f.ir, expected)
