"""The IR evaluator is the reference every lowering pass and the simplifier are checked
against, so a mistake in it hides in both sides of those comparisons. Here each of its
semantic rules is checked against plain Python/numpy at its edges: C division and
modulo signs, wrapping at each integer width, float types, casts, comparisons and bit
operations, and each statement's control flow and errors (issue 12)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from hidet_framework.analysis.evaluator import (
    Buffer, EvaluationError, Evaluator, PointerValue, SliceValue, _scalar, _wrap_int, evaluate_expr,
    evaluate_function,
)
from hidet_framework.ir import BinaryOp, Call, Cast, IfThenElse, UnaryOp, const, var
from hidet_framework.ir.expr import Address, Dereference, TensorElement
from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, BreakStmt, ContinueStmt, DeclareStmt, EvaluateStmt, ForStmt,
    IfStmt, ReturnStmt, SeqStmt, WhileStmt,
)
from hidet_framework.ir.func import Function
from hidet_framework.lang import cast, f32, i32, script



@pytest.fixture(autouse=True, params=["closures", "tree walker"])
def evaluator_kind(request, monkeypatch):
    """Every rule here holds for both ways of evaluating: the closures (what
    `evaluate_function` and `Evaluator` run) and the tree walker (`evaluate_expr`)."""
    from hidet_framework.analysis import evaluator

    cls = evaluator.Evaluator if request.param == "closures" else evaluator.TreeWalkingEvaluator
    monkeypatch.setattr(evaluator, "Evaluator", cls)               # evaluate_function
    monkeypatch.setattr(evaluator, "TreeWalkingEvaluator", cls)    # evaluate_expr
    monkeypatch.setitem(globals(), "Evaluator", cls)               # the tests' own evaluators
    return request.param


T = {name: data_type(name) for name in ("int8", "uint8", "int16", "int32", "int64", "uint32", "bool",
                                        "float16", "bfloat16", "float32", "float64")}


def _c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@pytest.mark.parametrize("a, b", list(itertools.product((-7, -6, -1, 0, 1, 6, 7), (-3, -2, -1, 1, 2, 3))))
def test_integer_division_and_modulo_truncate_like_c(a, b):
    q = evaluate_expr(BinaryOp("div", const(a), const(b)))
    r = evaluate_expr(BinaryOp("mod", const(a), const(b)))
    assert q == _c_div(a, b) and r == a - _c_div(a, b) * b
    assert q * b + r == a and (r == 0 or (r > 0) == (a > 0))


def test_division_by_zero_is_an_error_and_floats_divide_exactly():
    for op in ("div", "mod"):
        with pytest.raises(EvaluationError, match="division by zero"):
            evaluate_expr(BinaryOp(op, const(5), const(0)))
    assert evaluate_expr(BinaryOp("div", const(7.0), const(2.0))) == 3.5
    assert evaluate_expr(BinaryOp("mod", const(-7.5), const(2.0))) == np.fmod(-7.5, 2.0) == -1.5


def test_float_specials_follow_ieee_without_numpy_warnings():
    """inf - inf, inf * 0 and x / 0 give what the generated C gives (NaN, NaN, +-inf),
    and numpy's RuntimeWarnings stay off (warnings are errors here)."""
    import warnings

    x, y = var("x", "float32"), var("y", "float32")
    exprs = [BinaryOp("sub", x, x), BinaryOp("mul", x, y), BinaryOp("div", const(-1.0), y)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [evaluate_function(_fn([x, y], ReturnStmt(e), data_type("float32")), np.inf, 0.0) for e in exprs]
        folded = evaluate_expr(BinaryOp("sub", const(np.inf), const(np.inf)))
    assert np.isnan(got[0]) and np.isnan(got[1]) and got[2] == -np.inf
    assert np.isnan(folded)


@pytest.mark.parametrize("name, value, wrapped", [
    ("int8", 127, 127), ("int8", 128, -128), ("int8", -129, 127), ("int8", 255, -1), ("int8", 256, 0),
    ("uint8", 255, 255), ("uint8", 256, 0), ("uint8", -1, 255), ("int16", 32768, -32768),
    ("int32", 2**31 - 1, 2**31 - 1), ("int32", 2**31, -(2**31)), ("uint32", 2**32 + 5, 5),
    ("int64", 2**63, -(2**63)), ("int64", -(2**63) - 1, 2**63 - 1),
])
def test_integers_wrap_to_their_width(name, value, wrapped):
    assert _wrap_int(value, T[name]) == wrapped
    assert _scalar(value, T[name]) == wrapped


def test_wrapping_applies_to_every_arithmetic_result():
    x8 = var("x8", "int8")
    assert evaluate_expr(x8 + const(1, "int8"), {x8: 127}) == -128
    assert evaluate_expr(x8 * const(2, "int8"), {x8: 100}) == -56
    assert evaluate_expr(UnaryOp("neg", x8), {x8: -128}) == -128
    assert evaluate_expr(UnaryOp("bit_not", x8), {x8: 5}) == -6
    u8 = var("u8", "uint8")
    assert evaluate_expr(UnaryOp("bit_not", u8), {u8: 5}) == 250
    assert evaluate_expr(u8 - const(1, "uint8"), {u8: 0}) == 255


def test_scalar_types():
    assert _scalar(True, T["bool"]) is True and _scalar(0, T["bool"]) is False and _wrap_int(2, T["bool"]) is True
    assert type(_scalar(1.5, T["float16"])) is np.float16 and type(_scalar(1.5, T["float64"])) is np.float64
    assert type(_scalar(1.5, T["bfloat16"])) is np.float32 and type(_scalar(1, T["float32"])) is np.float32
    assert type(evaluate_expr(const(2.0, "float16") + const(1.0, "float16"))) is np.float16


@pytest.mark.parametrize("op, f", [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("min", min), ("max", max), ("bit_and", lambda a, b: a & b), ("bit_or", lambda a, b: a | b),
    ("bit_xor", lambda a, b: a ^ b), ("shl", lambda a, b: a << b), ("shr", lambda a, b: a >> b),
    ("eq", lambda a, b: a == b), ("ne", lambda a, b: a != b), ("lt", lambda a, b: a < b),
    ("le", lambda a, b: a <= b),
])
def test_binary_operators(op, f):
    for a, b in itertools.product((-6, 0, 3, 5, 12), (0, 1, 3, 5)):
        assert evaluate_expr(BinaryOp(op, const(a), const(b))) == f(a, b), (a, b)


def test_logic_short_circuits():
    calls = []
    env_flag = var("f", "bool")
    prim = {"test_eval_probe": lambda: calls.append(1) or True}
    probe = Call("test_eval_probe", (), data_type("bool"))
    ev = Evaluator(primitives=prim)
    for op, first, ran in (("and", False, 0), ("and", True, 1), ("or", True, 0), ("or", False, 1)):
        calls.clear()
        ev.env = {env_flag: first}
        value = ev.eval_expr(BinaryOp(op, env_flag, probe))
        assert len(calls) == ran and value == (first and True if op == "and" else first or True)
    ev.env = {}
    assert ev.eval_expr(UnaryOp("not", const(True))) is False and ev.eval_expr(UnaryOp("not", const(0))) is True


def test_casts_truncate_toward_zero_and_wrap():
    for value, want in ((2.7, 2), (-2.7, -2), (-0.5, 0), (300.0, 44)):
        assert evaluate_expr(Cast(const(value, "float32"), T["int8"] if value == 300.0 else T["int32"])) == want
    assert evaluate_expr(Cast(const(3), T["float32"])) == 3.0
    assert type(evaluate_expr(Cast(const(3), T["float32"]))) is np.float32
    assert evaluate_expr(Cast(const(300), T["uint8"])) == 44
    assert evaluate_expr(Cast(const(True), T["int32"])) == 1


def test_select_and_variables():
    x = var("x")
    assert evaluate_expr(IfThenElse(x < 3, const(10), const(20)), {x: 2}) == 10
    assert evaluate_expr(IfThenElse(x < 3, const(10), const(20)), {x: 3}) == 20
    with pytest.raises(EvaluationError, match="'x' is not defined"):
        evaluate_expr(x + 1)


def _fn(params, body, ret=None):
    return Function("f", list(params), body, ret_type=ret)


def test_statements_control_flow():
    n, i, acc = var("n"), var("i"), var("acc")
    # acc = 0; for i in range(n): if i == 2: continue; if i == 5: break; acc += i; return acc
    body = SeqStmt([
        DeclareStmt(acc, const(0)),
        ForStmt(i, n, SeqStmt([
            IfStmt(BinaryOp("eq", i, const(2)), ContinueStmt(), None),
            IfStmt(BinaryOp("eq", i, const(5)), BreakStmt(), None),
            AssignStmt(acc, acc + i),
        ])),
        ReturnStmt(acc),
    ])
    fn = _fn([n], body, data_type("int32"))
    assert evaluate_function(fn, 4) == 0 + 1 + 3
    assert evaluate_function(fn, 9) == 0 + 1 + 3 + 4
    assert evaluate_function(fn, 0) == 0
    # while with break and continue
    k = var("k")
    wbody = SeqStmt([
        DeclareStmt(k, const(0)), DeclareStmt(acc, const(0)),
        WhileStmt(k < n, SeqStmt([
            AssignStmt(k, k + 1),
            IfStmt(BinaryOp("eq", k % 2, const(0)), ContinueStmt(), None),
            IfStmt(k > 7, BreakStmt(), None),
            AssignStmt(acc, acc + k),
        ])),
        ReturnStmt(acc),
    ])
    wfn = _fn([n], wbody, data_type("int32"))
    assert evaluate_function(wfn, 6) == 1 + 3 + 5 and evaluate_function(wfn, 100) == 1 + 3 + 5 + 7
    assert evaluate_function(_fn([n], IfStmt(n < 0, ReturnStmt(const(-1)), ReturnStmt(const(1)))), -3) == -1
    assert evaluate_function(_fn([n], IfStmt(n < 0, ReturnStmt(const(-1)), ReturnStmt(const(1)))), 0) == 1
    assert evaluate_function(_fn([n], EvaluateStmt(n + 1)), 3) is None
    bare = _fn([n], SeqStmt([ReturnStmt(), ReturnStmt(n)]), data_type("int32"))
    assert evaluate_function(bare, 3) is None             # a bare return returns nothing, at once


def test_statement_errors():
    n = var("n")
    with pytest.raises(EvaluationError, match="assertion failed: n is small"):
        evaluate_function(_fn([n], AssertStmt(n < 3, "n is small")), 3)
    assert evaluate_function(_fn([n], AssertStmt(n < 3, "n is small")), 2) is None
    with pytest.raises(EvaluationError, match=r"assertion failed: \(n < 3\)"):  # no message: the condition
        evaluate_function(_fn([n], AssertStmt(n < 3)), 7)
    with pytest.raises(EvaluationError, match="undeclared variable"):
        evaluate_function(_fn([n], AssignStmt(var("zz"), n)), 1)
    with pytest.raises(EvaluationError, match="takes 1 arguments, got 2"):
        evaluate_function(_fn([n], ReturnStmt(n)), 1, 2)
    with pytest.raises(EvaluationError, match="^inline assembly cannot be evaluated in Python$"):
        evaluate_function(_fn([], AsmStmt("nop", (), (), True)))
    with pytest.raises(EvaluationError, match="unknown function"):
        evaluate_expr(Call("test_eval_nowhere", (), data_type("int32")))


def test_parameters_are_converted_to_their_types():
    n, x = var("n", "int8"), var("x", "float32")
    fn = _fn([n, x], ReturnStmt(n), data_type("int8"))
    assert evaluate_function(fn, 130, 1.0) == -126
    fx = _fn([n, x], ReturnStmt(x), data_type("float32"))
    assert type(evaluate_function(fx, 1, 2)) is np.float32
    # the caller's variables are restored after a call
    ev = Evaluator()
    ev.env = {n: 5}
    ev.call_function(fn, [1, 2.0])
    assert ev.env == {n: 5}


def test_declared_tensors_start_poisoned_and_views_alias():
    from hidet_framework.lang import register_tensor

    @script
    def g(out: f32[3], iout: i32[3]):
        t = register_tensor("float32", [3])
        u = register_tensor("int32", [3])
        for i in range(3):
            out[i] = t[i]
            iout[i] = u[i]

    out, iout = np.zeros(3, "float32"), np.zeros(3, "int32")
    evaluate_function(g.ir, out, iout)
    assert np.isnan(out).all() and (iout == 0x5A).all()


def test_buffers_pointers_and_slices():
    flat = np.arange(12, dtype="int32")
    from hidet_framework.ir.types import TensorType

    buf = Buffer(flat, TensorType(data_type("int32"), (3, 4)))
    ev = Evaluator()
    assert buf.offset(ev, [2, 1]) == 9 and buf.offset(ev, [7]) == 7  # flattened access
    ptr = PointerValue(buf, 5)
    assert ptr.offset(ev, [2]) == 7 and ptr.flat is flat
    with pytest.raises(EvaluationError, match="one index, got 2"):
        ptr.offset(ev, [1, 1])
    s = SliceValue(buf, [None, 2], [1, 0])
    assert s.full_indices([1]) == [2, 2]
    one = Buffer(np.arange(4), TensorType(data_type("int32"), (4,)))
    assert one.offset(ev, [3]) == 3


def test_out_of_bounds_reads_and_writes_are_errors():
    @script
    def rd(a: i32[4], k: i32) -> i32:
        return a[k]

    a = np.arange(4, dtype="int32")
    assert evaluate_function(rd.ir, a, 3) == 3
    with pytest.raises(EvaluationError, match="out-of-bounds"):
        evaluate_function(rd.ir, a, 4)
    with pytest.raises(EvaluationError, match="out-of-bounds"):
        evaluate_function(rd.ir, a, -1)


def test_addresses_and_dereferences():
    from hidet_framework.ir.types import TensorType

    t = var("t", TensorType(data_type("int32"), (3, 4)))
    ev = Evaluator()
    ev.env = {t: Buffer(np.arange(12, dtype=np.int32), t.type)}
    addr = Address(TensorElement(t, (const(1), const(2))))
    p = ev.eval_expr(addr)
    assert isinstance(p, PointerValue) and p.base == 6 and p.ttype is None
    assert ev.eval_expr(Dereference(addr)) == 6
    assert ev.eval_expr(Dereference(BinaryOp("add", addr, const(3)))) == 9
    assert ev.eval_expr(Dereference(BinaryOp("sub", addr, const(2)))) == 4
    assert ev.eval_expr(TensorElement(BinaryOp("add", addr, const(1)), (const(2),))) == 9
    with pytest.raises(EvaluationError, match="addresses of tensor elements only"):
        ev.eval_expr(Address(var("q")))


def test_declarations_and_assignments_wrap_to_the_variable_type():
    x8, k = var("x8", "int8"), var("k")
    body = SeqStmt([DeclareStmt(x8, const(130)), DeclareStmt(k), AssignStmt(k, x8 + 0),
                    AssignStmt(x8, k + 300), ReturnStmt(k * 1000 + x8)])
    fn = _fn([], body, data_type("int32"))
    # 130 -> -126 in int8; -126 + 300 = 174 -> -82 in int8
    assert evaluate_function(fn) == -126 * 1000 - 82
    with pytest.raises(EvaluationError, match="^integer division by zero$"):
        evaluate_expr(BinaryOp("div", const(1), const(0)))


def test_mixed_int_and_float_modulo_is_fmod():
    assert evaluate_expr(BinaryOp("mod", const(7), const(2.5))) == 2.0
    assert evaluate_expr(BinaryOp("mod", const(-7.0), const(2))) == -1.0


def test_pointer_parameters_and_non_tensors():
    from hidet_framework.ir.expr import TensorElement
    from hidet_framework.ir.types import PointerType

    p, n = var("p", PointerType(data_type("int32"))), var("n")
    fn = _fn([p, n], ReturnStmt(TensorElement(p, (n,))), data_type("int32"))
    assert evaluate_function(fn, np.arange(6, dtype=np.int32).reshape(2, 3), 4) == 4
    with pytest.raises(EvaluationError, match="^n is not a tensor or pointer$"):
        evaluate_expr(TensorElement(n, (const(0),)), {n: 3})


def test_bfloat16_local_tensors_are_float32_and_poisoned():
    from hidet_framework.lang import register_tensor

    @script
    def g(out: f32[2]):
        t = register_tensor("bfloat16", [2])
        out[0] = cast(t[1], "float32")

    out = np.zeros(2, "float32")
    evaluate_function(g.ir, out)
    assert np.isnan(out[0]) and out[1] == 0.0
