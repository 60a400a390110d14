"""The evaluator's two fast paths (session 12, issue 11: the evaluator target is most of
the suite's pure-Python time) against what they replace, value for value:

- ``Buffer.offset`` folds a layout over int indices to an int instead of building the
  offset expression from constants and evaluating it; where that fold is not an int
  (symbolic shapes) or not held by an int64 constant, it evaluates as before;
- ``_scalar`` looks up the numpy scalar type of a float dtype once per dtype name.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from hidet_framework.analysis.evaluator import Buffer, TreeWalkingEvaluator, _scalar
from hidet_framework.ir import const, var
from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.types import tensor_type
from hidet_framework.mapping.layout import column_major, dense, layout_of, local, row_major, swizzle


def _by_expression(ev, ttype, indices):
    """What the evaluator computed before the fast path: the layout's IR offset of
    constant indices, evaluated."""
    return int(ev.eval_expr(layout_of(ttype)(*[const(i) for i in indices])))


@pytest.mark.parametrize("layout", [None, row_major(3, 5, 7), column_major(3, 5, 7), dense(3, 5, 7, ranks=[1, 2, 0]),
                                    local(3, 5, 7)], ids=str)
def test_int_offsets_equal_the_evaluated_expression(layout):
    ev = TreeWalkingEvaluator()
    ttype = tensor_type("float32", (3, 5, 7), layout)
    buf = Buffer(np.full(105, np.nan, np.float32), ttype)
    seen = set()
    for idx in itertools.product(range(3), range(5), range(7)):
        got = buf.offset(ev, list(idx))
        assert type(got) is int and got == _by_expression(ev, ttype, idx) == layout_of(ttype).offset(*idx)
        seen.add(got)
    if not isinstance(layout, type(local(1))):
        assert seen == set(range(105))  # a bijection onto the buffer
    # negative and past-the-end indices are folded the same way (the caller checks the range)
    for idx in [(-1, 0, 0), (3, 4, 6), (0, -2, 9)]:
        assert buf.offset(ev, list(idx)) == _by_expression(ev, ttype, idx)
    with pytest.raises(ValueError, match="takes 3 indices, got 2"):
        buf.offset(ev, [1, 2])


def test_swizzled_layout_offsets_equal_the_evaluated_expression():
    ev = TreeWalkingEvaluator()
    ttype = tensor_type("float16", (8, 64), swizzle(row_major(8, 64), vector=8))
    buf = Buffer(np.zeros(512, np.float16), ttype)
    got = [buf.offset(ev, [i, j]) for i in range(8) for j in range(64)]
    assert got == [_by_expression(ev, ttype, (i, j)) for i in range(8) for j in range(64)]
    assert sorted(got) == list(range(512)) and got != list(range(512))  # really swizzled


def test_offsets_an_int64_constant_cannot_hold_wrap_as_before():
    ev = TreeWalkingEvaluator()
    big = 2 ** 40
    ttype = tensor_type("float32", (big, big, 4))  # strides 2**42, 4, 1
    buf = Buffer(np.zeros(1, np.float32), ttype)
    for idx in [(2 ** 21, 0, 0), (2 ** 21, 0, 1), (2 ** 22 + 3, 5, 2), (2 ** 21 - 1, big - 1, 3), (-(2 ** 21) - 1, 0, 0)]:
        assert buf.offset(ev, list(idx)) == _by_expression(ev, ttype, idx)
    assert buf.offset(ev, [2 ** 21, 0, 1]) == -(2 ** 63) + 1  # 2**63 + 1 wraps, as the int64 constant's evaluation does
    assert buf.offset(ev, [2 ** 21 - 1, big - 1, 3]) == 2 ** 63 - 1  # the largest int64 stays as is


def test_symbolic_shapes_are_evaluated_with_their_variables():
    n = var("n")
    ev = TreeWalkingEvaluator()
    ev.env[n] = 7
    ttype = tensor_type("float32", (3, n))
    buf = Buffer(np.zeros(21, np.float32), ttype)
    assert [buf.offset(ev, [i, j]) for i in range(3) for j in range(7)] == list(range(21))


def test_float_scalars_by_dtype_in_any_order():
    names = ["float16", "bfloat16", "float32", "float64"]
    want = {"float16": np.float16, "bfloat16": np.float32, "float32": np.float32, "float64": np.float64}
    for order in (names, names[::-1], ["float32", "float16", "float64", "bfloat16"]):
        for name in order:
            got = _scalar(1.0 / 3.0, data_type(name))
            assert type(got) is want[name] and got == want[name](1.0 / 3.0), name
    assert _scalar(np.float32(2.5), data_type("float64")) == 2.5 and type(_scalar(3, data_type("int8"))) is int
    assert _scalar(300, data_type("int8")) == 44 and _scalar(2, data_type("bool")) is True


def test_constant_values_are_remembered_per_node_and_the_memo_is_bounded(monkeypatch):
    from hidet_framework.analysis import evaluator

    monkeypatch.setattr(evaluator, "_CONSTANTS", {})
    monkeypatch.setattr(evaluator, "_CONSTANTS_LIMIT", 3)
    ev = TreeWalkingEvaluator()  # the memo is the tree walker's; closures hold their constant
    # equal values of different types are different constants: 1 (int8, wrapped), 1.0 (float16), True
    nodes = [const(257, "int8"), const(1.0, "float16"), const(True), const(1, "int64"), const(2.5, "bfloat16"),
             const(-1, "uint8")]
    want = [(1, int), (1.0, np.float16), (True, bool), (1, int), (2.5, np.float32), (255, int)]
    for _ in range(2):
        for node, (value, kind) in zip(nodes, want):
            got = ev.eval_expr(node)
            assert got == value and type(got) is kind, (node, got)
            assert len(evaluator._CONSTANTS) <= 3
    assert all(ev.eval_expr(n) is ev.eval_expr(n) for n in nodes[:2])  # the second look-up is the memo's
