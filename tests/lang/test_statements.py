"""Statements and expressions: each construct's IR, checked by evaluation or by shape."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.ir import dtypes
from hidet_framework.analysis.evaluator import EvaluationError, evaluate_function
from hidet_framework.ir.functors import collect
from hidet_framework.ir.expr import BinaryOp, Cast, IfThenElse, TensorSlice
from hidet_framework.ir.stmt import AssertStmt, AssignStmt, DeclareStmt, IfStmt, WhileStmt
from hidet_framework.ir.types import PointerType, Scope, TensorType
from hidet_framework.lang import (
    attrs, boolean, cast, f16, f32, f64, float32, i32, i64, int32, local_tensor, register_tensor, script,
    shared_tensor, tensor_pointer,
)

rng = np.random.default_rng()


def test_annotations_give_parameter_types():
    @script
    def f(a: f32[4, n], b: ~f16, n: int32, x: float32, y: i64, flag: boolean, z: int):
        pass

    a, b, n, x, y, flag, z = f.ir.params
    assert isinstance(a.type, TensorType) and a.type.dtype is dtypes.float32
    assert a.type.shape[0] == 4 and a.type.shape[1] is n
    assert isinstance(b.type, PointerType) and b.type.base is dtypes.float16
    assert (n.type, x.type, y.type, flag.type, z.type) == (
        dtypes.int32, dtypes.float32, dtypes.int64, dtypes.boolean, dtypes.int32)


def test_string_annotations_work_without_future_import():
    @script
    def f(n: i32, a: "f32[n]"):
        pass

    assert f.ir.params[1].type.shape[0] is f.ir.params[0]


def test_declare_then_assign_and_declared_type():
    @script
    def f(x: f32[2]) -> f32:
        s = 1.5            # first binding declares an f32
        s = s * 2.0        # later bindings assign
        t: f64 = s         # declared type converts
        u: f32 = 3         # an int literal becomes an f32 constant
        x[0] = cast(t, "f32") + u
        return s

    body = f.ir.body.stmts
    assert isinstance(body[0], DeclareStmt) and body[0].var.type is dtypes.float32
    assert isinstance(body[1], AssignStmt) and body[1].var is body[0].var
    assert isinstance(body[2].init, Cast) and body[2].var.type is dtypes.float64
    assert body[3].init.dtype is dtypes.float32
    out = np.zeros(2, "float32")
    assert evaluate_function(f.ir, out) == 3.0
    assert out[0] == 6.0
    assert f.ir.ret_type is dtypes.float32


def test_augmented_assignment_on_tensor_elements_and_names():
    @script
    def f(x: i32[3], y: f16[1]):
        i = 5
        i -= 2
        i *= 4        # 12
        i //= 5       # 2
        i %= 7
        i <<= 3       # 16
        x[0] += i
        x[1] |= 6
        x[2] ^= 1
        y[0] += 1.5   # converted back to f16 like C's compound assignment

    x = np.array([1, 8, 3], "int32")
    y = np.array([0.25], "float16")
    evaluate_function(f.ir, x, y)
    assert x.tolist() == [17, 14, 2] and y[0] == np.float16(1.75)


@pytest.mark.parametrize("v,expect", [(-5.0, -1.0), (0.0, 0.0), (0.5, 1.0), (3.0, 2.0)])
def test_if_elif_else_with_ir_conditions(v, expect):
    @script
    def sign_bucket(x: f32, out: f32[1]):
        if x < 0.0:
            out[0] = -1.0
        elif x == 0.0:
            out[0] = 0.0
        elif 0.0 < x <= 1.0:   # chained comparison
            out[0] = 1.0
        else:
            out[0] = 2.0

    assert isinstance(sign_bucket.ir.body, IfStmt)
    out = np.full(1, np.nan, "float32")
    evaluate_function(sign_bucket.ir, v, out)
    assert out[0] == expect


@pytest.mark.parametrize("mode", ["relu", "square", "id"])
def test_if_on_host_condition_traces_only_the_taken_branch(mode):
    @script
    def act(x: f32[4]):
        for i in range(4):
            if mode == "relu":
                x[i] = x[i] if x[i] > 0.0 else 0.0
            elif mode == "square" and True:
                x[i] = x[i] * x[i]
            else:
                pass

    x = rng.standard_normal(4).astype("float32")
    want = {"relu": np.maximum(x, 0), "square": x * x, "id": x.copy()}[mode]
    evaluate_function(act.ir, x)
    np.testing.assert_allclose(x, want, rtol=1e-6)
    assert collect(act.ir, IfStmt) == []  # the host condition left no IfStmt behind


def test_logic_and_ternary_expressions():
    @script
    def f(a: i32, b: i32, out: i32[4]):
        out[0] = 1 if a > 0 and b > 0 else 0
        out[1] = 1 if a > 0 or b > 0 else 0
        out[2] = 1 if not a > 0 else 0
        out[3] = max(a, b, 3) - min(a, b) + abs(a - b)

    for a, b in [(1, 2), (-1, 2), (-3, -4)]:
        out = np.zeros(4, "int32")
        evaluate_function(f.ir, a, b, out)
        assert out.tolist() == [int(a > 0 and b > 0), int(a > 0 or b > 0), int(not a > 0),
                                max(a, b, 3) - min(a, b) + abs(a - b)]
    assert isinstance(f.ir.body.stmts[0].value, IfThenElse)


def test_host_boolean_operands_fold_in_python():
    flag = False

    @script
    def f(a: i32, out: i32[1]):
        out[0] = 1 if flag and a > 0 else 2     # host False decides: no IR comparison

    assert f.ir.body.value.value == 2


def test_while_break_continue():
    @script
    def collatz_steps(n: i32) -> i32:
        steps = 0
        while True:
            if n == 1:
                break
            steps += 1
            if n % 2 == 0:
                n = n // 2
                continue
            n = 3 * n + 1
        return steps

    assert any(isinstance(s, WhileStmt) for s in collatz_steps.ir.body.stmts)
    assert evaluate_function(collatz_steps.ir, 27) == 111


def test_assert_statement():
    @script
    def f(n: i32):
        assert n > 0, "n must be positive"
        assert n < 100

    assert isinstance(f.ir.body.stmts[0], AssertStmt) and f.ir.body.stmts[0].message == "n must be positive"
    assert f.ir.body.stmts[1].message == "n < 100"
    evaluate_function(f.ir, 5)
    with pytest.raises(EvaluationError, match="n must be positive"):
        evaluate_function(f.ir, -1)


def test_tensor_declarations_and_scopes():
    @script
    def f(x: f32[4], out: f32[4]):
        smem = shared_tensor(f32, [2, 4])
        regs = register_tensor("float32", (4,))
        tmp = local_tensor(f32, 4)
        buf: f32[4]
        for i in range(4):
            smem[1, i] = x[i]
            regs[i] = smem[1, i] * 2.0
            tmp[i] = regs[i] + 1.0
            buf[i] = tmp[i]
            out[i] = buf[i]

    decls = [s for s in f.ir.body.stmts if isinstance(s, DeclareStmt)]
    assert [d.scope for d in decls] == [Scope.SHARED, Scope.REGISTER, Scope.LOCAL, Scope.LOCAL]
    assert decls[0].var.type.shape == (2, 4)
    x, out = rng.standard_normal(4).astype("float32"), np.full(4, np.nan, "float32")
    evaluate_function(f.ir, x, out)
    np.testing.assert_allclose(out, x * 2 + 1, rtol=1e-6)


def test_tensor_pointer_declares_a_view():
    @script
    def f(p: ~f32, n: i32):
        t = tensor_pointer(f32, [n, 4], init=p)
        t[1, 2] = 7.0

    decl = f.ir.body.stmts[0]
    assert isinstance(decl, DeclareStmt) and decl.init is f.ir.params[0]
    assert isinstance(decl.var.type, TensorType) and decl.var.type.shape[0] is f.ir.params[1]


def test_tensor_pointer_evaluates_as_a_view():
    @script
    def f(p: ~f32):
        t = tensor_pointer(f32, [2, 4], init=p)
        t[1, 2] = 7.0

    mem = np.zeros(8, "float32")
    evaluate_function(f.ir, mem)
    assert mem[6] == 7.0


def test_slices_and_shape_attributes():
    @script
    def f(a: f32[3, 5], out: f32[5]):
        row = a[1, :]
        part = a[0:2, 4]
        for j in range(a.shape[1]):
            out[j] = row[j] + part[1]

    assert isinstance(f.ir.body.body.value.a.base, TensorSlice)  # slices are names, not declarations
    a, out = rng.standard_normal((3, 5)).astype("float32"), np.full(5, np.nan, "float32")
    evaluate_function(f.ir, a, out)
    np.testing.assert_allclose(out, a[1] + a[1, 4], rtol=1e-6)


def test_function_attributes():
    @script
    def k(a: f32[n], n: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = "k_renamed"
        attrs.cuda.grid_dim = ((n + 127) // 128, 2)
        attrs.cuda.block_dim = 128
        attrs.cuda.dynamic_smem_bytes = 4 * 256
        attrs.cuda.min_blocks = 2

    fn = k.ir
    assert fn.kind == "cuda_kernel" and fn.name == "k_renamed"
    assert fn.attrs["block_dim"] == (128,) and fn.attrs["dynamic_smem_bytes"] == 1024
    assert fn.attrs["min_blocks"] == 2
    gx, gy = fn.attrs["grid_dim"]
    assert isinstance(gx, BinaryOp) and gy == 2
    assert "attrs.grid_dim" in str(k)


def test_default_kind_is_public_and_bool_locals():
    @script
    def f(a: i32) -> boolean:
        ok = a > 3
        ok = ok and a < 10
        return ok

    assert f.ir.kind == "public" and f.ir.ret_type is dtypes.boolean
    assert evaluate_function(f.ir, 5) is True and evaluate_function(f.ir, 11) is False
