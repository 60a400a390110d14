"""The IR printer's text, whole: people read it in error messages, in test ids and when
debugging a pass, so every construct is checked against its exact expected text
(unique names for distinct variables with one hint, loop hints, function attributes,
slices, constants of every kind). Written to kill mutants of ir/printer.py (issue 12)."""
from __future__ import annotations

from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.expr import (
    Address, BinaryOp, Call, Cast, Dereference, IfThenElse, TensorElement, TensorSlice, UnaryOp, const, var,
)
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.printer import format_ir
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, BreakStmt, BufferStoreStmt, ContinueStmt, DeclareStmt, EvaluateStmt,
    ForMappingStmt, ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, WhileStmt,
)
from hidet_framework.ir.types import PointerType, Scope, TensorType
from hidet_framework.mapping.task_mapping import spatial

F32, I32 = data_type("float32"), data_type("int32")


def test_expressions():
    i, i2, f = var("i"), var("i"), var("f", "float32")
    t = var("t", TensorType(F32, (4, 6)))
    p = var("p", PointerType(F32))
    cases = [
        (BinaryOp("add", i, i2), "(i + i_1)"), (BinaryOp("min", i, const(3)), "min(i, 3)"),
        (BinaryOp("max", i, const(3)), "max(i, 3)"), (BinaryOp("and", i < 1, i < 2), "((i < 1) and (i < 2))"),
        (BinaryOp("or", i < 1, i < 2), "((i < 1) or (i < 2))"), (BinaryOp("mod", i, const(3)), "(i % 3)"),
        (UnaryOp("not", i < 1), "(not (i < 1))"), (UnaryOp("neg", i), "(-i)"),
        (const(True), "True"), (const(False), "False"), (const(3), "3"), (const(1.5), "1.5"),
        (const(3, "int64"), "i64(3)"), (const(2.0, "float16"), "f16(2.0)"), (const(7, "uint8"), "u8(7)"),
        (Cast(i, F32), "cast(i, f32)"), (Call("g", (i, const(1)), I32), "g(i, 1)"), (Call("h", (), I32), "h()"),
        (TensorElement(t, (i, const(0))), "t[i, 0]"),
        (TensorSlice(t, (i, None), (None, const(1)), (None, const(5))), "t[i, 1:5]"),
        (TensorSlice(t, (None, None), (None, None), (None, const(5))), "t[:, :5]"),
        (IfThenElse(i < 1, f, const(0.0)), "(f if (i < 1) else 0.0)"),
        (Address(TensorElement(t, (i, i))), "&t[i, i]"), (Dereference(p), "*p"),
    ]
    for e, want in cases:
        assert format_ir(e) == want, (want, format_ir(e))
    assert str(BinaryOp("add", i, i2)) == "(i + i_1)"


def test_a_function_with_every_statement():
    n, i, j, acc = var("n"), var("i"), var("j"), var("acc")
    a = var("a", TensorType(F32, (n, 4)))
    p = var("p", PointerType(None))
    buf = var("buf", TensorType(F32, (8,)))
    k = var("k")
    body = SeqStmt([
        DeclareStmt(acc, const(0)),
        DeclareStmt(buf, None, Scope.SHARED),
        ForStmt(i, n, SeqStmt([
            IfStmt(i < 2, ContinueStmt(), BreakStmt()),
            AssignStmt(acc, acc + i),
        ]), unroll=4, parallel=True),
        ForStmt(j, const(3), BufferStoreStmt(a, (j, const(0)), const(1.5)), unroll=True),
        ForStmt(j, const(2), None),
        WhileStmt(acc < 10, AssignStmt(acc, acc + 1)),
        LetStmt(k, n * 2, EvaluateStmt(Call("g", (k,), I32))),
        ForMappingStmt((i,), spatial(4), k, AssertStmt(i < 4, "in range")),
        IfStmt(acc < 0, ReturnStmt(), None),
        AsmStmt("mov %0, %1;", (("=r", acc),), (("r", n),)),
        ReturnStmt(acc),
    ])
    fn = Function("f", [n, a, p], body, kind="public", ret_type=I32, attrs={"grid": (n, 2), "label": "x"})
    want = """def f(n: i32, a: f32[n, 4], p: ~void) -> i32:  # public
    # attrs.grid = (n, 2)
    # attrs.label = x
    declare acc: i32 in local = 0
    declare buf: f32[8] in shared
    for i in range(n):  # parallel, unroll=4
        if (i < 2):
            continue
        else:
            break
        acc = (acc + i)
    for j in range(3):  # unroll
        a[j, 0] = 1.5
    for j in range(2):
        pass
    while (acc < 10):
        acc = (acc + 1)
    let k = (n * 2)
    g(k)
    for i in spatial(4).on(k):
        assert (i < 4), 'in range'
    if (acc < 0):
        return
    asm('mov %0, %1;', outputs=['=r': acc], inputs=['r': n])
    return acc"""
    assert format_ir(fn) == want
    void = Function("v", [], None)
    assert format_ir(void) == "def v():  # public\n    pass"
    assert format_ir(IRModule("m", {"f": fn, "v": void})) == want + "\n\ndef v():  # public\n    pass"


def test_reductions_print_their_fields():
    from hidet_framework.compute import reduce, tensor_input

    x = tensor_input("x", "float32", [5])
    r = reduce([5], lambda k: x[k], "max")
    assert format_ir(r) == "ReduceCompute(axes=(k), extents=(5), value=x[k], kind=max, acc_dtype=float32)"
