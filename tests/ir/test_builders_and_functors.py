"""The IR's builders and walkers: Python operators on expressions (each builds the
node it names, reflected forms with their operands in order), the math functions
(variant by dtype, narrow types computed in float32 and cast back, exact fma, refusals)
and the rewriter/visitor/substitute over every node that holds expressions. Written to
kill mutants of ir/ (issue 12)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hidet_framework.analysis.evaluator import evaluate_expr
from hidet_framework.ir import dtypes
from hidet_framework.ir import math_functions as mf
from hidet_framework.ir.expr import BinaryOp, Call, Cast, TensorSlice, UnaryOp, const, var
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.functors import collect, substitute
from hidet_framework.ir.primitives import lookup_primitive
from hidet_framework.ir.stmt import AsmStmt, AssignStmt, DeclareStmt, SeqStmt
from hidet_framework.ir.types import TensorType

a, b = var("a"), var("b")


@pytest.mark.parametrize("build, op, first, second", [
    (lambda: a + 2, "add", a, 2), (lambda: 2 + a, "add", 2, a), (lambda: a - 2, "sub", a, 2),
    (lambda: 2 - a, "sub", 2, a), (lambda: a * 2, "mul", a, 2), (lambda: 2 * a, "mul", 2, a),
    (lambda: a / 2, "div", a, 2), (lambda: 2 / a, "div", 2, a), (lambda: a // 2, "div", a, 2),
    (lambda: 2 // a, "div", 2, a), (lambda: a % 2, "mod", a, 2), (lambda: 2 % a, "mod", 2, a),
    (lambda: a & 2, "bit_and", a, 2), (lambda: a | 2, "bit_or", a, 2), (lambda: a ^ 2, "bit_xor", a, 2),
    (lambda: a << 2, "shl", a, 2), (lambda: a >> 2, "shr", a, 2), (lambda: a < 2, "lt", a, 2),
    (lambda: a <= 2, "le", a, 2), (lambda: a > 2, "lt", 2, a), (lambda: a >= 2, "le", 2, a),
])
def test_python_operators_build_their_node(build, op, first, second):
    e = build()
    assert isinstance(e, BinaryOp) and e.op == op
    for got, want in ((e.a, first), (e.b, second)):
        assert got is want if not isinstance(want, int) else (got.value == want and got.dtype is dtypes.int32)


def test_unary_operators():
    assert isinstance(-a, UnaryOp) and (-a).op == "neg" and (-a).a is a
    assert (~a).op == "bit_not" and (~a).a is a


@pytest.mark.parametrize("name, impl, args", [
    ("exp", np.exp, (0.5,)), ("log", np.log, (2.5,)), ("sqrt", np.sqrt, (2.0,)), ("rsqrt", lambda x: 1 / np.sqrt(x), (4.0,)),
    ("tanh", np.tanh, (0.3,)), ("erf", math.erf, (0.4,)), ("abs_", np.abs, (-1.5,)), ("floor", np.floor, (-1.5,)),
    ("ceil", np.ceil, (-1.5,)), ("sin", np.sin, (0.7,)), ("cos", np.cos, (0.7,)), ("pow_", np.power, (2.0, 3.0)),
    ("fmin", np.fmin, (2.0, 3.0)), ("fmax", np.fmax, (2.0, 3.0)), ("fma", lambda x, y, z: x * y + z, (2.0, 3.0, 1.0)),
])
def test_math_builders(name, impl, args):
    fn = getattr(mf, name)
    base = name.rstrip("_").replace("fmin", "min").replace("fmax", "max")
    e32 = fn(*[const(x, "float32") for x in args])
    assert isinstance(e32, Call) and e32.func == f"{base}_f32" and e32.ret_type is dtypes.float32
    assert float(evaluate_expr(e32)) == pytest.approx(float(impl(*args)), rel=1e-6)
    e64 = fn(*[const(x, "float64") for x in args])
    assert e64.func == f"{base}_f64" and evaluate_expr(e64) == pytest.approx(float(impl(*args)), rel=1e-12)
    mixed = fn(*([const(args[0], "float64")] + [const(x, "float32") for x in args[1:]]))
    assert mixed.func == f"{base}_f64" and all(x.dtype is dtypes.float64 or
                                                 (isinstance(x, Cast) and x.dtype is dtypes.float64) for x in mixed.args)


def test_narrow_floats_compute_in_float32():
    h = var("h", "float16")
    e = mf.exp(h)
    assert isinstance(e, Cast) and e.dtype is dtypes.float16 and e.expr.func == "exp_f32"
    assert isinstance(e.expr.args[0], Cast) and e.expr.args[0].dtype is dtypes.float32
    bf = mf.fmax(var("x", "bfloat16"), const(1.0, "float32"))
    assert isinstance(bf, Cast) and bf.dtype is dtypes.bfloat16
    f = mf.fmax(const(1.0, "float32"), var("x", "float16"))
    assert not isinstance(f, Cast) and f.func == "max_f32"


def test_math_refusals_and_exact_fma():
    with pytest.raises(KeyError, match="unknown math function 'expm1'; known: exp, log"):
        mf.math_primitive("expm1", const(1.0))
    with pytest.raises(TypeError, match="exp takes scalar float arguments, got int32"):
        mf.exp(a)
    with pytest.raises(TypeError, match="pow takes scalar float arguments, got float32, int32"):
        mf.pow_(const(1.0), a)
    x = 1.0 + 2.0**-30
    assert mf._fma_exact(x, x, -1.0) == 2.0**-29 + 2.0**-60  # exact, rounded once
    assert mf._fma_exact(x, x, -1.0) != x * x - 1.0
    assert math.isnan(mf._fma_exact(float("inf"), 0.0, 1.0)) and mf._fma_exact(float("inf"), 1.0, 1.0) == float("inf")
    assert np.isnan(mf.MATH_FUNCTIONS["min"](np.nan, 1.0)) is np.False_ and mf.MATH_FUNCTIONS["min"](np.nan, 1.0) == 1.0


def test_spellings_cover_every_function():
    with pytest.raises(ValueError, match=r"test_kind: no spelling for math functions \['abs', "):
        mf.register_math_spellings("test_kind", {"exp": "e({0})"})
    spellings = {n: f"{n}{{s}}({{0}})" for n in mf.MATH_FUNCTIONS}
    texts = mf.register_math_spellings("test_kind", spellings)
    assert "expf({0})" in texts and "exp({0})" in texts and len(texts) == 2 * len(mf.MATH_FUNCTIONS)
    assert lookup_primitive("exp_f32").emit["test_kind"] == "expf({0})"
    assert lookup_primitive("exp_f64").emit["test_kind"] == "exp({0})"
    assert lookup_primitive("sqrt_f64").ret_type is dtypes.float64


def test_substitute_reaches_every_expression_holder():
    n, m = var("n"), var("m")
    t = var("t", TensorType(dtypes.float32, (8, 8)))
    s = TensorSlice(t, (None, n), (n, None), (n + 1, None))
    got = substitute(s, {n: m})
    assert got.indices[1] is m and got.starts[0] is m and got.ends[0].a is m and n not in collect(got, type(n))
    asm = AsmStmt("add %0, %1;", (("=r", n),), (("r", n + 1),))
    got = substitute(asm, {n: m})
    assert got.outputs[0][1] is m and got.inputs[0][1].a is m
    assert substitute(asm, {b: m}) is asm                       # nothing changed: the same node
    assign = AssignStmt(n, n + 1)
    assert n in collect(assign, type(n)) and substitute(assign, {n: m}).var is m
    fn = Function("f", [n], SeqStmt([DeclareStmt(b, n)]), kind="public")
    mod = IRModule("mod", {"f": fn, "g": Function("g", [], None, kind="device")})
    assert substitute(mod, {a: m}) is mod
    new = substitute(mod, {n: m})
    assert new is not mod and new.functions["g"] is mod.functions["g"] and new.functions["f"].body.stmts[0].init is m
    assert [f.name for f in mod.entry_functions()] == ["f"]
    kinds = IRModule("k", {k: Function(k, [], None, kind=k) for k in ("public", "cpu_kernel", "cuda_kernel", "device")})
    assert [f.name for f in kinds.entry_functions()] == ["public", "cpu_kernel", "cuda_kernel"]


def test_dispatch_by_class_then_base_classes():
    from hidet_framework.ir.functors import _Dispatch

    class Names(_Dispatch):           # a fresh class: its methods are looked up, not cached
        def visit_Expr(self, e):
            return "expr"

        def visit_Constant(self, e):
            return "constant"

    assert Names().visit(const(1)) == "constant" and Names().visit(a) == "expr" and Names().visit(None) is None
    assert Names().visit(a + 1) == "expr"
    with pytest.raises(TypeError, match="^Names cannot visit int$"):
        Names().visit(3)


def test_hash_equality_paths_and_conversions():
    from hidet_framework.ir.equality import StructuralMismatch, assert_structural_equal, structural_hash
    from hidet_framework.ir.expr import IfThenElse, convert, tensor_element_or_slice

    c = var("c")
    assert structural_hash((a + b) + a) != structural_hash((a + b) + b)
    assert structural_hash({"k": 1}) != structural_hash({"k": 2})
    with pytest.raises(StructuralMismatch, match=r"^IR differs at \[1\]: 1 vs 2$"):
        assert_structural_equal((a, 1), (b, 2))
    n64 = convert(np.int64(5))
    assert n64.value == 5 and n64.dtype is dtypes.int64 and convert(np.float32(1.5)).dtype is dtypes.float32
    assert dtypes.data_type("uint16x5").lanes == 5 and dtypes.data_type("uint16x5").element is dtypes.uint16
    t = var("t", TensorType(dtypes.float32, (8,)))
    with pytest.raises(ValueError, match="^tensor slices with a step are not supported$"):
        tensor_element_or_slice(t, (slice(0, 8, 2),))
    sel = substitute(IfThenElse(a < 1, b, c), {c: a})
    assert sel.else_expr is a and sel.then_expr is b
    assert c in collect(DeclareStmt(b, c + 1), type(c))


def test_visitors_reach_assigned_and_declared_variables():
    n, m, k = var("n"), var("m"), var("k")
    assert collect(AssignStmt(n, m + 1), type(n)) == [n, m] or set(collect(AssignStmt(n, m + 1), type(n))) == {n, m}
    assert set(collect(DeclareStmt(k, m * 2), type(k))) == {k, m}
