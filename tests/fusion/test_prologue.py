"""Prologues: injective producers grafted onto the anchor's input loads."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf

# cuda: runs on the lent GPU machine (marked; skipped with the reason elsewhere)
TARGETS = ["cpu", "evaluator", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_of_relu(target, fx, rng):
    fx.need_ops("matmul", "relu")
    x = hf.symbol((5, 7), "float32")
    w = hf.constant(rng.standard_normal((7, 3)).astype(np.float32))
    y = hf.ops.matmul(hf.ops.relu(x), w)
    fused, unfused = fx.check(target, [y], [x], lambda xv: [np.maximum(xv, 0) @ w.storage], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 2)
    (row,) = fused.fusion_report()
    assert row.status == "fused" and row.operators == "relu -> [matmul]"


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_of_transpose_and_of_a_reshape_chain(target, fx, rng):
    """One operand is a transposed graph input; the other a relu then a reshape (a
    chain of two producers)."""
    fx.need_ops("matmul", "transpose", "reshape", "relu")
    a = hf.symbol((7, 5), "float32")
    b = hf.symbol((21,), "float32")
    c = hf.ops.matmul(hf.ops.transpose(a, [1, 0]), hf.ops.reshape(hf.ops.relu(b), [7, 3]))
    fused, unfused = fx.check(target, [c], [a, b],
                              lambda av, bv: [av.T @ np.maximum(bv, 0).reshape(7, 3)], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 4)
    assert [r.status for r in fused.fusion_report()] == ["fused"]


@pytest.mark.parametrize("target", TARGETS)
def test_reduction_of_a_broadcast_producer(target, fx, rng):
    """A producer that is injective but not bijective (a broadcast) still fuses as a
    prologue: prologues only need injectivity."""
    fx.need_ops("broadcast_to", "mul")
    x = hf.symbol((1, 13), "float32")
    s = hf.symbol((5, 13), "float32")
    y = fx.row_sum(hf.ops.mul(hf.ops.broadcast_to(x, [5, 13]), s))
    fused, unfused = fx.check(target, [y], [x, s], lambda xv, sv: [(xv * sv).sum(1)], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 3)


@pytest.mark.parametrize("producer", ["slice", "pad", "concat"])
def test_guarded_template_reads_evaluate_the_producer_in_range(producer, fx, rng):
    """The CPU template reads past M and N only under a guard (zero-padded panels);
    the grafted producer sits inside that guard, so with bounds checks compiled in
    (``bounds_check``) no read of the producer's inputs is out of range."""
    from hidet_framework import driver
    from hidet_framework.lowering.pass_context import PassContext

    fx.need_ops("matmul", producer)
    a, c, b = hf.symbol((9, 17), "float32"), hf.symbol((7, 6), "float32"), hf.symbol((13, 11), "float32")
    build = {"slice": lambda: (hf.ops.slice(a, [1, 2], [8, 15]), [a], lambda av: av[1:8, 2:15]),
             "pad": lambda: (hf.ops.pad(c, [0, 3, 0, 4]), [c], lambda cv: np.pad(cv, ((0, 0), (3, 4)))),
             "concat": lambda: (hf.ops.concat([c, hf.ops.slice(a, [0, 0], [7, 7])], 1), [c, a],
                                lambda cv, av: np.concatenate([cv, av[:7, :7]], 1))}[producer]
    x, inputs, ref = build()
    driver.clear_task_cache()
    try:
        with PassContext(config={"bounds_check": True}):
            fused, _ = fx.check("cpu", [hf.ops.matmul(x, b)], inputs + [b],
                                lambda *vs: [ref(*vs[:-1]) @ vs[-1]], rng)
    finally:
        driver.clear_task_cache()
    assert [r.status for r in fused.fusion_report()][-1] == "fused"
