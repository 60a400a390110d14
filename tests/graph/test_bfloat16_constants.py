"""bfloat16 constants given as ml_dtypes arrays (what torch and jax users hold) go
through the graph passes and compile: common-subexpression elimination hashes their
bytes, and two equal constants become one."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.graph.passes.eliminate_common_subexpressions import eliminate_common_subexpressions

ml_dtypes = pytest.importorskip("ml_dtypes")


def _weights(seed: int, shape=(3, 7)):
    return np.random.default_rng(seed).standard_normal(shape).astype(ml_dtypes.bfloat16)


def test_equal_bfloat16_constants_merge_and_different_ones_do_not():
    x = hf.symbol((3, 7), "bfloat16", name="x")
    a, same_as_a, other = (hf.constant(_weights(s)) for s in (1, 1, 2))
    graph = hf.trace([x + a, x + same_as_a, x + other], [x])
    merged = eliminate_common_subexpressions(graph)
    assert len(merged.constants()) == 2
    assert len(graph.constants()) == 3


@pytest.mark.parametrize("shape", [(), (1,), (5, 3)])
def test_zero_d_and_shaped_bfloat16_constants_hash_by_value(shape):
    x = hf.symbol(shape, "bfloat16", name="x")
    one, also_one = hf.constant(np.ones(shape, ml_dtypes.bfloat16)), hf.constant(np.ones(shape, ml_dtypes.bfloat16))
    graph = hf.trace([x * one, x * also_one], [x])
    assert len(eliminate_common_subexpressions(graph).constants()) == 1


def test_a_bfloat16_constant_compiles_and_matches_float64():
    w = _weights(3)
    x = hf.symbol((3, 7), "bfloat16", name="x")
    fn = hf.compile(hf.trace(x * hf.constant(w), [x]), target="cpu")
    xv = _weights(4)
    got = np.asarray(fn(xv)).view(np.uint16)
    ref = xv.astype(np.float64) * w.astype(np.float64)
    got_values = (got.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(got_values, ref, rtol=2 ** -7)
