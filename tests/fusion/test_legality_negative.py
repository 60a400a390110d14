"""What must not fuse: a slice, a gather, a reduction, a broadcast and a two-stage task
(a reduction in an intermediate stage, an injective last stage) after an anchor, and
a reduction or a two-stage task before one, each stay out of the anchor's group (or
anchor their own), and fusion_report() says why. Each case is also run (evaluator,
fused and unfused against numpy), and the legal counterpart before the anchor (a
prologue slice, gather or broadcast) is checked to fuse, so the test cannot pass by
fusing nothing.

Each was checked by loosening the check it guards once: epilogue bijectivity taken as
always true (slice, gather, broadcast after the anchor join its group) and
``Task.is_injective`` reading only the output stages (the two-stage task joins as an
epilogue or a prologue); every such loosening turns these tests red."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.graph import Operator, Tensor


def center_rows(x: Tensor) -> Tensor:
    """x minus its row means: a reduction in an intermediate stage, an injective output."""
    a = tensor_input("a", x.dtype, x.shape)
    rows, cols = x.shape
    mean = compute("mean", [rows], lambda i: reduce([cols], lambda k: a[i, k], "sum") / cols)
    y = compute("y", [rows, cols], lambda i, j: a[i, j] - mean[i])
    return Operator("center_rows", [x], Task("center_rows", [a], [y])).outputs[0]


def _center_np(v):
    return v - v.mean(-1, keepdims=True)


def _rows(fn):
    return [(r.operators, r.status, r.reason) for r in fn.fusion_report()]


def _row_with(fn, name: str):
    (row,) = [r for r in fn.fusion_report() if name in r.operators.replace("[", " ").replace("]", " ").split()]
    return row


def _apart(fn, anchor: str, other: str) -> bool:
    """No row (fused or fallen back) holds both operators."""
    return not any(anchor in r.operators and other in r.operators.replace(anchor, "")
                   for r in fn.fusion_report())


AFTER = {
    # name: (build(mm) -> tensor, numpy(mm) -> array, extra inputs)
    "slice": (lambda mm, _: hf.ops.slice(mm, [1], [6], axes=[1]), lambda m, _: m[:, 1:6]),
    "gather": (lambda mm, idx: hf.ops.gather(mm, idx, axis=0), lambda m, idx: m[idx]),
    "reduce_sum": (lambda mm, _: hf.ops.reduce_sum(mm, axes=[1], keepdims=True), lambda m, _: m.sum(1, keepdims=True)),
    "broadcast_to": (lambda mm, _: hf.ops.broadcast_to(mm, [2, 5, 7]),
                     lambda m, _: np.broadcast_to(m, (2, 5, 7))),
    "center_rows": (lambda mm, _: center_rows(mm), lambda m, _: _center_np(m)),
}
WHY = {"slice": "not a bijection", "gather": "not fused after", "reduce_sum": "reduces",
       "broadcast_to": "not a bijection", "center_rows": "reduces"}


@pytest.mark.parametrize("consumer", sorted(AFTER))
def test_a_consumer_that_is_not_a_bijection_stays_out_of_the_epilogue(consumer, fx, rng):
    fx.need_ops("matmul", "slice", "gather", "reduce_sum", "broadcast_to")
    build, ref = AFTER[consumer]
    a, b = hf.symbol((5, 4)), hf.symbol((4, 7))
    idx_values = np.array([4, 0, 4], np.int64)  # a repeated row: gather is not injective from its input
    idx = hf.constant(idx_values)
    out = hf.ops.relu(build(hf.ops.matmul(a, b), idx))
    fused, _ = fx.check("evaluator", [out], [a, b],
                        lambda av, bv: [np.maximum(ref(av @ bv, idx_values), 0)], rng)
    assert _apart(fused, "matmul", consumer), _rows(fused)
    row = _row_with(fused, "matmul")
    assert f"{consumer} not fused after matmul" in row.reason and WHY[consumer] in row.reason, _rows(fused)


@pytest.mark.parametrize("producer", ["reduce_sum", "center_rows"])
def test_a_reduction_before_an_anchor_is_its_own_anchor(producer, fx, rng):
    fx.need_ops("matmul", "reduce_sum")
    a, b = hf.symbol((5, 4)), hf.symbol((4, 7))
    if producer == "reduce_sum":
        x, ref = hf.ops.reduce_sum(hf.ops.reshape(a, [5, 2, 2]), axes=[2]), lambda av: av.reshape(5, 2, 2).sum(2)
        b2 = hf.symbol((2, 7))
        inputs, rb = [a, b2], (2, 7)
    else:
        x, ref, inputs, rb = center_rows(a), _center_np, [a, b], (4, 7)
    out = hf.ops.matmul(x, inputs[1])
    fused, _ = fx.check("evaluator", [out], inputs, lambda av, bv: [ref(av) @ bv], rng)
    assert _apart(fused, "matmul", producer), _rows(fused)
    row = _row_with(fused, "matmul")
    assert f"{producer} not fused before matmul" in row.reason and "reduces" in row.reason, _rows(fused)
    assert rb == tuple(inputs[1].shape)


@pytest.mark.parametrize("producer", ["slice", "gather", "broadcast_to"])
def test_the_same_operators_before_an_anchor_fuse_as_its_prologue(producer, fx, rng):
    fx.need_ops("matmul", producer)
    a, b = hf.symbol((6, 4)), hf.symbol((4, 7))
    idx_values = np.array([5, 0, 5, 2], np.int64)
    build = {"slice": (lambda: hf.ops.slice(a, [1], [5], axes=[0]), lambda av: av[1:5]),
             "gather": (lambda: hf.ops.gather(a, hf.constant(idx_values), axis=0), lambda av: av[idx_values]),
             "broadcast_to": (lambda: hf.ops.broadcast_to(hf.ops.slice(a, [0], [1], axes=[0]), [3, 4]),
                              lambda av: np.broadcast_to(av[:1], (3, 4)))}[producer]
    fused, _ = fx.check("evaluator", [hf.ops.matmul(build[0](), b)], [a, b],
                        lambda av, bv: [build[1](av) @ bv], rng)
    row = _row_with(fused, "matmul")
    assert row.status == "fused" and producer in row.operators, _rows(fused)


def test_a_value_read_twice_is_stored_and_the_report_says_so(fx, rng):
    fx.need_ops("matmul")
    a, b = hf.symbol((5, 4)), hf.symbol((4, 7))
    mm = hf.ops.matmul(a, b)
    outs = [hf.ops.relu(mm), hf.ops.tanh(mm)]  # read twice, never reconverging (fusion/epilogue_dag.py)
    fused, _ = fx.check("evaluator", outs, [a, b],
                        lambda av, bv: [np.maximum(av @ bv, 0), np.tanh(av @ bv)], rng)
    assert "stored after matmul: it is read 2 times" in _row_with(fused, "matmul").reason
