"""The partition's legality checks, each at its boundary: an edge fuses only when its
tensor has exactly one use, is not a graph output and is not empty; an epilogue takes
only single-output consumers that are bijective from the anchor's output. Checked on
the partition itself (which operators end up in which group), evaluator target, no
compiler. Written for the fusion mutants that the end-to-end tests let through."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf


def _fused(fn) -> list[str]:
    """The operator lists of the fused groups (anchor in brackets), sorted."""
    return sorted(r.operators for r in fn.fusion_report() if r.status == "fused")


def test_single_use_chain_fuses():
    x = hf.symbol((4, 5))
    fn = hf.compile(hf.trace([hf.ops.exp(hf.ops.relu(hf.ops.neg(x)))], inputs=[x]), target="evaluator")
    assert fn.pass_stats["partition_fusion_groups"] == {"groups": 1, "operators_fused": 3}


def test_a_tensor_used_twice_is_not_fused_across():
    x = hf.symbol((4, 5))
    shared = hf.ops.relu(hf.ops.neg(x))  # read by two consumers: must be stored
    out = hf.ops.add(hf.ops.exp(shared), hf.ops.tanh(shared))
    stats = hf.compile(hf.trace([out], inputs=[x]), target="evaluator").pass_stats["partition_fusion_groups"]
    assert stats["groups"] == 2 and stats["operators_fused"] == 5  # {neg, relu} and {exp, tanh, add}


def test_a_returned_intermediate_is_not_fused_across():
    x = hf.symbol((4, 5))
    mid = hf.ops.relu(hf.ops.neg(x))
    out = hf.ops.exp(mid)
    stats = hf.compile(hf.trace([out, mid], inputs=[x]), target="evaluator").pass_stats["partition_fusion_groups"]
    assert stats["groups"] == 1 and stats["operators_fused"] == 2  # {neg, relu}; exp alone


def test_an_empty_tensor_is_not_fused():
    x = hf.symbol((0, 5))
    out = hf.ops.exp(hf.ops.relu(x))
    fn = hf.compile(hf.trace([out], inputs=[x]), target="evaluator")
    assert fn.pass_stats["partition_fusion_groups"]["operators_fused"] == 0
    assert fn(np.zeros((0, 5), np.float32)).shape == (0, 5)
    y = hf.symbol((1, 5))
    fn = hf.compile(hf.trace([hf.ops.exp(hf.ops.relu(y))], inputs=[y]), target="evaluator")
    assert fn.pass_stats["partition_fusion_groups"]["operators_fused"] == 2  # one element is enough


def test_epilogue_takes_only_bijective_single_output_consumers(fx):
    fx.need_ops("matmul", "relu", "broadcast_to", "transpose")
    a, b = hf.symbol((3, 4)), hf.symbol((4, 5))
    mm = hf.ops.matmul(a, b)
    bijective = hf.ops.relu(mm)  # epilogue
    fn = hf.compile(hf.trace([hf.ops.transpose(bijective)], inputs=[a, b]), target="evaluator")
    (group,) = [g for g in _fused(fn) if "matmul" in g]
    assert "relu" in group and "transpose" in group
    mm2 = hf.ops.matmul(a, b)
    widened = hf.ops.broadcast_to(hf.ops.reshape(mm2, [1, 3, 5]), [2, 3, 5])  # not a bijection from mm2
    fn = hf.compile(hf.trace([widened], inputs=[a, b]), target="evaluator")
    print(fn.fusion_report())
    assert not any("matmul" in g and "broadcast_to" in g for g in _fused(fn))
