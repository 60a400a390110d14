"""Groups without a non-injective anchor: chains and trees of injective operators
become one auto-scheduled kernel anchored at their last operator."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf

# cuda: runs on the lent GPU machine (marked; skipped with the reason elsewhere)
TARGETS = ["cpu", "evaluator", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.mark.parametrize("target", TARGETS)
def test_chain_of_five(target, fx, rng):
    fx.need_ops("relu", "add", "tanh", "mul", "sigmoid")
    x = hf.symbol((3, 17), "float32")
    y = hf.symbol((3, 17), "float32")
    z = hf.ops.sigmoid(hf.ops.mul(hf.ops.tanh(hf.ops.add(hf.ops.relu(x), y)), 0.5))
    z = hf.ops.add(z, 1.0)
    fused, unfused = fx.check(target, [z], [x, y],
                              lambda xv, yv: [1 / (1 + np.exp(-0.5 * np.tanh(np.maximum(xv, 0) + yv))) + 1.0], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 6)
    (row,) = fused.fusion_report()
    assert row.status == "fused" and row.scheduled_by == "auto"
    assert fused.pass_stats["partition_fusion_groups"] == {"groups": 1, "operators_fused": 6}


@pytest.mark.parametrize("target", TARGETS)
def test_tree_with_broadcast_and_slice(target, fx, rng):
    """Two branches (one broadcast, one sliced) joined by an add: a tree of producers."""
    fx.need_ops("add", "exp", "broadcast_to", "slice", "neg")
    a = hf.symbol((1, 7), "float32")
    b = hf.symbol((5, 11), "float32")
    left = hf.ops.exp(hf.ops.broadcast_to(a, [5, 7]))
    right = hf.ops.neg(hf.ops.slice(b, [2], [9], [1]))
    out = hf.ops.add(left, right)
    fused, unfused = fx.check(target, [out], [a, b],
                              lambda av, bv: [np.exp(np.broadcast_to(av, (5, 7))) - bv[:, 2:9]], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 5)


def test_fused_chain_plans_less_memory(fx, rng):
    """The 9-operator chain of tests/graph: fused, no intermediate is materialised."""
    fx.need_target("evaluator")
    fx.need_ops("mul")
    x = hf.symbol((16, 16), "float32")
    y = x
    for k in range(8):
        y = hf.ops.mul(y, 1.0 + k / 8)
    out = fx.row_sum(y)
    fused, unfused = fx.check("evaluator", [out], [x],
                              lambda xv: [(xv * np.prod([1.0 + k / 8 for k in range(8)])).sum(1)], rng)
    assert (fused.num_launches, unfused.num_launches) == (1, 9)
    assert fused.memory_report().intermediate_bytes == 16 * 4
    assert fused.memory_report().peak_bytes < unfused.memory_report().peak_bytes
