"""Epilogues: bijective consumers grafted onto the anchor's output stores."""
from __future__ import annotations

import math

import numpy as np
import pytest

import hidet_framework as hf

# cuda: runs on the lent GPU machine (marked; skipped with the reason elsewhere)
TARGETS = ["cpu", "evaluator", pytest.param("cuda", marks=pytest.mark.cuda)]


def gelu_ref(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_bias_gelu(target, fx, rng):
    fx.need_ops("matmul", "add", "gelu")
    x = hf.symbol((7, 11), "float32")
    w = hf.constant(rng.standard_normal((11, 5)).astype(np.float32))
    bias = hf.symbol((5,), "float32")
    y = hf.ops.gelu(hf.ops.add(hf.ops.matmul(x, w), bias))
    fused, unfused = fx.check(target, [y], [x, bias], lambda xv, bv: [gelu_ref(xv @ w.storage + bv)], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 3)
    (row,) = fused.fusion_report()
    assert row.operators == "[matmul] -> add -> gelu" and row.status == "fused"


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_residual_then_reshape(target, fx, rng):
    """A residual add (its other input is the anchor's own input) and a reshape (a
    bijection with a div/mod index map) after the anchor."""
    fx.need_ops("matmul", "add", "reshape")
    x = hf.symbol((6, 6), "float32")
    w = hf.constant(rng.standard_normal((6, 6)).astype(np.float32))
    y = hf.ops.reshape(hf.ops.add(hf.ops.matmul(x, w), x), [4, 9])
    fused, unfused = fx.check(target, [y], [x], lambda xv: [(xv @ w.storage + xv).reshape(4, 9)], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 3)


@pytest.mark.parametrize("target", TARGETS)
def test_batched_matmul_then_transpose(target, fx, rng):
    """A permutation consumer: the store index goes through Task.inverse_map."""
    fx.need_ops("matmul", "transpose", "relu")
    a = hf.symbol((3, 5, 7), "float32")
    b = hf.symbol((3, 7, 2), "float32")
    y = hf.ops.relu(hf.ops.transpose(hf.ops.matmul(a, b), [2, 0, 1]))
    fused, unfused = fx.check(target, [y], [a, b],
                              lambda av, bv: [np.maximum(np.transpose(av @ bv, (2, 0, 1)), 0)], rng)
    assert fused.num_launches == 1 < unfused.num_launches


@pytest.mark.parametrize("target", TARGETS)
def test_sum_then_scale(target, fx, rng):
    """A reduction anchor (auto-scheduled) with an epilogue chain."""
    fx.need_ops("mul", "sub")
    x = hf.symbol((9, 13), "float32")
    scale = hf.symbol((9,), "float32")
    y = hf.ops.sub(hf.ops.mul(fx.row_sum(x), scale), 1.0)
    fused, unfused = fx.check(target, [y], [x, scale], lambda xv, sv: [xv.sum(1) * sv - 1.0], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 3)
    assert fused.fusion_report()[0].operators == "[row_sum] -> mul -> sub"


@pytest.mark.parametrize("target", TARGETS)
def test_pooling_with_prologue_and_epilogue(target, fx, rng):
    fx.need_ops("global_avg_pool2d", "relu", "mul", "reshape")
    x = hf.symbol((2, 3, 5, 7), "float32")
    y = hf.ops.reshape(hf.ops.mul(hf.ops.global_avg_pool2d(hf.ops.relu(x)), 2.0), [6])
    fused, unfused = fx.check(target, [y], [x],
                              lambda xv: [2.0 * np.maximum(xv, 0).mean(axis=(2, 3)).reshape(6)], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 4)
