"""The evaluator's closures (``analysis/evaluator_closures.py``, issue 11: the evaluator
target is the suite's largest pure-Python cost) against the tree walker they replace,
bit for bit: the same value of the same type, the same bytes in every output tensor,
the same exception with the same message, on random expressions of every dtype and
operator, on functions using every statement, and on nodes the closures cannot prepare
ahead (they must fail when evaluated, as the walker does, not when built)."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from hidet_framework.analysis import evaluator_closures
from hidet_framework.analysis.evaluator import Buffer, Evaluator, TreeWalkingEvaluator, _scalar
from hidet_framework.analysis.evaluator_closures import closure
from hidet_framework.analysis.evaluator_values import scalar_of
from hidet_framework.ir import BinaryOp, Call, Cast, IfThenElse, UnaryOp, const, var
from hidet_framework.ir.dtypes import data_type, vector_type
from hidet_framework.ir.expr import BINARY_OPS, Address, Dereference, TensorElement, TensorSlice
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.math_functions import MATH_FUNCTIONS  # noqa: F401 (registers exp_f32)
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, BreakStmt, BufferStoreStmt, ContinueStmt, DeclareStmt,
    EvaluateStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, WhileStmt,
)
from hidet_framework.ir.types import PointerType, tensor_type
from hidet_framework.mapping.layout import column_major, dense, local, row_major, swizzle
from hidet_framework.mapping.task_mapping import spatial

INTS = ["int8", "uint8", "int16", "int32", "int64", "uint32"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
DTYPES = INTS + FLOATS + ["bool"]
EDGES = {"int": [0, 1, -1, 2, 7, -128, 127, 255, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)],
         "float": [0.0, -0.0, 1.5, -2.75, 1e30, -1e-30, float("nan"), float("inf"), 3.0, -7.0]}


def _outcome(run):
    """What running `run()` gives, comparable bit for bit: value type and bytes, or the
    exception's type and message."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # float16 overflow on a cast warns outside errstate
            v = run()
    except Exception as exc:  # noqa: BLE001 - the exception is the outcome compared
        return ("raised", type(exc).__name__, str(exc))
    if isinstance(v, np.generic):
        return ("value", type(v).__name__, v.tobytes())
    return ("value", type(v).__name__, repr(v))


def _both(e, env):
    outs = []
    for cls in (TreeWalkingEvaluator, Evaluator):
        ev = cls()
        ev.env = dict(env)
        outs.append(_outcome(lambda: ev.eval_expr(e)))
    return outs


def _leaf(rng, variables):
    if rng.random() < 0.5:
        return rng.choice(variables)
    name = rng.choice(DTYPES)
    t = data_type(name)
    value = rng.choice(EDGES["float"] if t.is_float() else [True, False] if name == "bool" else EDGES["int"])
    return const(value, name)


def _expr(rng, variables, depth):
    if depth == 0 or rng.random() < 0.2:
        return _leaf(rng, variables)
    a, b = _expr(rng, variables, depth - 1), _expr(rng, variables, depth - 1)
    kind = rng.random()
    if kind < 0.6:
        op = rng.choice(sorted(BINARY_OPS))
        if op in ("shl", "shr"):  # the shift amount: small, sometimes negative (an error in both);
            # int32, as -1 of an unsigned type is a shift by billions of bits (a 512 MB int)
            b = const(rng.choice([0, 1, 3, 31, 70, -1]), "int32")
        return BinaryOp(op, a, b)
    if kind < 0.75:
        return UnaryOp(rng.choice(["neg", "not", "bit_not"]), a)
    if kind < 0.9:
        return Cast(a, data_type(rng.choice(DTYPES)))
    return IfThenElse(a, b, _expr(rng, variables, depth - 1))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # float16 overflow when binding the draws
def test_random_expressions_match_the_tree_walker_bit_for_bit():
    rng = random.Random(20261202)
    variables = [var(f"v_{name}", name) for name in DTYPES]
    kinds, raised = set(), 0
    for _ in range(2500):
        e = _expr(rng, variables, rng.randint(1, 4))
        for _round in range(2):  # the second round runs the closures already built
            env = {v: rng.choice(EDGES["float"] if v.type.is_float() else [True, False]
                                 if v.type.name == "bool" else EDGES["int"]) for v in variables}
            env = {v: TreeWalkingEvaluator()._bind_param(v, x) for v, x in env.items()}
            walker, closures = _both(e, env)
            assert walker == closures, str(e)
            kinds.add(walker[1])
            raised += walker[0] == "raised"
    # the draw reaches ints, numpy floats, bools and errors (both sides must raise alike)
    assert {"int", "bool", "float16", "float32", "float64"} <= kinds and raised > 100


LAYOUTS = [None, row_major(5, 7), column_major(5, 7), dense(5, 7, ranks=[1, 0]), local(5, 7),
           swizzle(row_major(5, 8), vector=2)]


def _program(layout):
    """A module whose `main` uses every statement the closures build, on a 5 x 7 (or 5 x 8)
    int32 tensor `a` of the given layout and a NaN-poisoned float32 output."""
    cols = 8 if layout is not None and layout.shape[1] == 8 else 7
    a = var("a", tensor_type("int32", (5, cols), layout))
    out = var("out", tensor_type("float32", (cols, 5)))
    n, i, j, k, acc, w, p, x8 = var("n"), var("i"), var("j"), var("k"), var("acc", "float64"), var("w"), \
        var("p", PointerType(data_type("int32"))), var("x8", "int8")
    tmp = var("tmp", tensor_type("float32", (3,)))
    q = var("q")
    sq = Function("sq", [q], ReturnStmt(Cast(q * q + 1, data_type("int8"))), ret_type=data_type("int8"))
    row = TensorSlice(a, (i, None), (None, const(1)), (None, None))
    body = SeqStmt([
        DeclareStmt(acc, const(0.0, "float64")), DeclareStmt(tmp), DeclareStmt(x8, const(200)),
        ForStmt(i, 5, ForStmt(j, cols, SeqStmt([
            IfStmt(BinaryOp("eq", (i + j) % 3, const(0)), ContinueStmt(), None),
            IfStmt(i * cols + j > n, BreakStmt(), None),
            BufferStoreStmt(out, (j, i), Cast(TensorElement(a, (i, j)), data_type("float32")) * 0.5
                            + Cast(acc, data_type("float32"))),
            AssignStmt(acc, acc + Cast(TensorElement(a, (i, j)), data_type("float64")) / 3.0),
            IfStmt(j > 0, AssignStmt(x8, x8 + Call("sq", (TensorElement(row, (j - 1,)),), data_type("int8"))), None),
        ]))),
        LetStmt(k, n - 1, BufferStoreStmt(out, ((k + cols) % cols, 0), Cast(x8, data_type("float32")))),
        DeclareStmt(w, const(0)),
        WhileStmt(w < 9, SeqStmt([AssignStmt(w, w + 2), IfStmt(w > 6, BreakStmt(), ContinueStmt())])),
        DeclareStmt(p, Address(TensorElement(a, (const(1), const(2))))),
        BufferStoreStmt(out, (const(1), const(1)), Cast(Dereference(BinaryOp("add", p, w)), data_type("float32"))),
        BufferStoreStmt(out, (const(2), const(2)),
                        Cast(Dereference(BinaryOp("sub", p, const(2))), data_type("float32"))),
        ForMappingStmt((i, j), spatial(2, 3), Call("threadIdx_x", (), data_type("int32")),
                       BufferStoreStmt(out, (j + 3, i + 3), Call("exp_f32", (Cast(i - j, data_type("float32")),),
                                                                    data_type("float32")))),
        BufferStoreStmt(tmp, (const(1),), TensorElement(out, (const(0), const(0)))),
        EvaluateStmt(TensorElement(tmp, (const(2),))),
        AssertStmt(n < 40, "n is below 40"),
        ReturnStmt(acc + Cast(w, data_type("float64"))),
    ])
    main = Function("main", [a, out, n], body, ret_type=data_type("float64"))
    return IRModule("m", {"main": main, "sq": sq}), cols


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
@pytest.mark.parametrize("n", [0, 3, 17, 34, 39, 40])
def test_functions_match_the_tree_walker_bit_for_bit(layout, n):
    module, cols = _program(layout)
    a_values = np.random.default_rng(cols * 100 + n).integers(-50, 50, size=5 * cols).astype(np.int32)
    results = []
    for cls in (TreeWalkingEvaluator, Evaluator):
        for worker in (4, 7):  # worker 7 is beyond the mapping's 6 workers: it runs no task
            out = np.full(cols * 5, np.nan, np.float32)
            ev = cls(module, {"threadIdx_x": lambda worker=worker: worker})
            got = _outcome(lambda: ev.call_function(module.functions["main"], [a_values.copy(), out, n]))
            results.append((got, out.tobytes()))
    assert results[:2] == results[2:]
    assert (results[0][0][0] == "raised") == (n >= 40)
    assert results[0][0] != results[1][0] or results[0][1] != results[1][1]  # the worker mattered


def test_errors_match_the_tree_walker():
    n, t = var("n"), var("t", tensor_type("int32", (3, 5)))
    cases = [
        EvaluateStmt(TensorElement(t, (const(3), const(0)))),      # out of bounds
        EvaluateStmt(TensorElement(t, (const(0), const(0), const(0)))),  # rank
        EvaluateStmt(TensorElement(n, (const(0),))),                # not a tensor
        AssignStmt(var("undeclared"), n),
        EvaluateStmt(var("nowhere") + 1),
        EvaluateStmt(Call("test_closures_nowhere", (), data_type("int32"))),
        AsmStmt("nop", (), (), True),
        AssertStmt(n < 0),
        EvaluateStmt(BinaryOp("div", n, const(0))),
        EvaluateStmt(Address(var("q"))),
    ]
    for stmt in cases:
        fn = Function("f", [t, n], stmt)
        outs = [_outcome(lambda: cls().call_function(fn, [np.zeros(15, np.int32), 2]))
                for cls in (TreeWalkingEvaluator, Evaluator)]
        assert outs[0] == outs[1] and outs[0][0] == "raised", str(stmt)


def test_what_cannot_be_prepared_fails_only_when_evaluated():
    """A constant numpy has no scalar type for and an op whose type cannot be inferred:
    in a branch not taken nothing fails; taken, both raise the same error."""
    n, t = var("n"), var("t", tensor_type("int32", (3,)))
    bad = [const(1.0, vector_type("float32", 4)), BinaryOp("add", t, const(1)),
           UnaryOp("neg", t)]
    for e in bad:
        fn = Function("f", [t, n], IfStmt(n > 0, EvaluateStmt(e), None))
        for arg, raised in ((0, False), (1, True)):
            outs = [_outcome(lambda: cls().call_function(fn, [np.zeros(3, np.int32), arg]))
                    for cls in (TreeWalkingEvaluator, Evaluator)]
            assert outs[0] == outs[1] and (outs[0][0] == "raised") == raised, (str(e), outs)


def test_closures_are_built_once_per_node_and_the_cache_is_bounded(monkeypatch):
    x = var("x")
    e = (x + 1) * 3
    assert closure(e) is closure(e) and closure(None)(Evaluator()) is None
    monkeypatch.setattr(evaluator_closures, "_CLOSURES", {})
    monkeypatch.setattr(evaluator_closures, "_CLOSURES_LIMIT", 5)
    ev = Evaluator()
    for v in range(40):
        ev.env = {x: v}
        assert ev.eval_expr((x + v) * (x - 1) + 2) == ((v + v) * (v - 1) + 2)
        assert len(evaluator_closures._CLOSURES) <= 5


@pytest.mark.parametrize("shape", [(5, 7), (3, 1, 4), (2**40, 2**30)], ids=str)
def test_int_offsets_equal_the_layout_offsets(shape):
    """`Buffer.int_offset` (dense layouts of int shape: the sum of index times stride)
    against ``Buffer.offset`` (the layout's own fold), in range, negative, past the end,
    and past int64 (the last shape's offsets overflow it and go through the IR)."""
    ev = TreeWalkingEvaluator()
    layouts = [None, column_major(*shape), dense(*shape, ranks=list(range(1, len(shape))) + [0])]
    if len(shape) == 2:
        layouts.append(swizzle(row_major(shape[0], 8), vector=2) if shape[0] < 8 else local(*shape))
    for layout in layouts:
        ttype = tensor_type("float32", layout.shape if layout is not None else shape, layout)
        buf = Buffer(np.zeros(1, np.float32), ttype)
        probes = [[i, j] + [1] * (len(ttype.shape) - 2) for i in (-1, 0, 2, 4) for j in (-3, 0, 5, 7)]
        if shape[0] > 2**32:
            probes += [[2**39, 2**29], [2**40 - 1, 2**30 - 1], [2**33, 0], [-(2**35), 5]]
        for idx in probes + [[3]]:  # [3]: a flattened access
            assert _outcome(lambda: buf.int_offset(ev, idx)) == _outcome(lambda: buf.offset(ev, idx)), (layout, idx)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_scalar_converters_equal_scalar():
    """`scalar_of(t)` (worked out once per node) against `_scalar(v, t)` (per value): every
    dtype, wrap edges, floats into ints, NaN and inf (errors alike), a vector dtype."""
    values = [0, 1, -1, 127, 128, -129, 255, 256, 2**31, -(2**31) - 1, 2**63, 2**64 + 3, True, False,
              2.5, -2.5, np.float32(3.75), np.float16(-1.5), float("nan"), float("inf"), 1e30]
    for t in [data_type(name) for name in DTYPES] + [vector_type("float32", 4), vector_type("int32", 2)]:
        convert_to = scalar_of(t)
        for v in values:
            assert _outcome(lambda: convert_to(v)) == _outcome(lambda: _scalar(v, t)), (t, v)


def test_int_division_and_modulo_match_on_every_sign():
    """The closures divide non-negative ints directly (`_index_div`); every other sign pair
    must still truncate like C, as the walker does; by zero, the same error."""
    x, y = var("x"), var("y")
    for a in (-7, -6, -1, 0, 1, 6, 7, 2**31 - 1, -(2**31)):
        for b in (-3, -2, -1, 0, 1, 2, 3, 7):
            for op in ("div", "mod"):
                for e in (BinaryOp(op, x, y), BinaryOp(op, x, const(b)), BinaryOp(op, const(a), y)):
                    walker, closures = _both(e, {x: a, y: b})
                    assert walker == closures, (str(e), a, b)
