"""The attention rule (hidet_plugin_ops/rules_attention.py): it fires on the variants
of the pattern, and the rewritten graph matches a float64 numpy reference (fused and
unfused, evaluator and cpu; cuda under ``-m cuda``); it leaves near-misses alone
(softmax over another axis, a scale that is not one value, a mask that widens the
scores, an operator between the product and the softmax), whose graphs still match."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.pipeline import run_graph_passes

TARGETS = ["evaluator", "cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
B, H, M, N, D, DV = 2, 3, 5, 7, 4, 6  # odd and prime extents


def _softmax(s, axis=-1):
    s = s - s.max(axis, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis, keepdims=True)


def _c(value) -> hf.Tensor:
    return hf.constant(np.asarray(value, dtype=np.float32))


class Case:
    """A graph of hf operators and the same math in float64 numpy, on one set of operands."""

    def __init__(self, rng, q_shape=(B, H, M, D), k_shape=(B, H, N, D), v_shape=(B, H, N, DV), extra=()):
        self.values = [rng.standard_normal(s).astype(np.float32) for s in (q_shape, k_shape, v_shape, *extra)]
        self.symbols = [hf.symbol(v.shape, "float32") for v in self.values]

    def kt(self, ops, k):
        """k transposed over its last two axes, in either library."""
        if ops is np:
            return np.swapaxes(k, -1, -2)
        return hf.ops.transpose(k, [*range(k.rank - 2), k.rank - 1, k.rank - 2])


def _graph_and_reference(build, rng, **shapes):
    case = Case(rng, **shapes)
    out = build(hf.ops, case, *case.symbols)
    graph = hf.trace(out, inputs=case.symbols)
    want = build(np, case, *[v.astype(np.float64) for v in case.values])
    return graph, case, want


def _ops_after_rewrite(graph) -> list[str]:
    return [op.name for op in run_graph_passes(graph, GraphPassContext(target="cpu")).nodes]


def _check(graph, case, want, target, fx, rtol=1e-4, atol=1e-5):
    fx.need_target(target)
    for fusion in (True, False):
        fn = hf.compile(graph, target=target, fusion=fusion)
        np.testing.assert_allclose(fn(*case.values), want, rtol=rtol, atol=atol, err_msg=f"fusion={fusion}")


def _mm(ops, a, b):
    return ops.matmul(a, b)


def _sm(ops, z, axis=-1):
    return _softmax(z, axis) if ops is np else ops.softmax(z, axis=axis)


CAUSAL = np.tril(np.ones((M, N), dtype=bool))
HOLE = CAUSAL.copy()
HOLE[2] = False  # a fully masked row: -inf everywhere, NaN probabilities, zeros after the guard
ROW_MASK = np.random.default_rng(7).standard_normal((B, 1, 1, N)).astype(np.float32)


def v_div_add(ops, c, q, k, v):          # BERT as written: (q @ k^T) / sqrt(d) + mask
    z = _mm(ops, q, c.kt(ops, k))
    z = z / np.sqrt(D) if ops is np else ops.div(z, _c(np.sqrt(D)))
    z = z + ROW_MASK if ops is np else ops.add(z, _c(ROW_MASK))
    return _mm(ops, _sm(ops, z), v)


def v_mul_first(ops, c, q, k, v):        # c * z, mask on the left
    z = _mm(ops, q, c.kt(ops, k))
    z = 0.37 * z if ops is np else ops.mul(_c(0.37), z)
    z = ROW_MASK + z if ops is np else ops.add(_c(ROW_MASK), z)
    return _mm(ops, _sm(ops, z), v)


def v_scale_after_mask(ops, c, q, k, v):  # (z + mask) * c: the mask is scaled too
    z = _mm(ops, q, c.kt(ops, k))
    z = (z + ROW_MASK) * 0.5 if ops is np else ops.mul(ops.add(z, _c(ROW_MASK)), _c([[[[0.5]]]]))
    return _mm(ops, _sm(ops, z), v)


def v_causal_select(ops, c, q, k, v):    # where(causal, z, -inf), then the NaN guard
    z = _mm(ops, q, c.kt(ops, k)) * 0.25 if ops is np else ops.mul(_mm(ops, q, c.kt(ops, k)), _c(0.25))
    if ops is np:
        with np.errstate(invalid="ignore"):
            p = _softmax(np.where(HOLE, z, -np.inf))
        return np.where(np.isnan(p), 0.0, p) @ v
    z = ops.where(hf.constant(HOLE), z, _c(-np.inf))
    p = ops.softmax(z, axis=-1)
    return ops.matmul(ops.where(ops.isnan(p), _c(0.0), p), v)


def v_inverted_select(ops, c, q, k, v):  # where(not causal, -1e9, z)
    z = _mm(ops, q, c.kt(ops, k))
    if ops is np:
        return _softmax(np.where(~CAUSAL, -1e9, z)) @ v
    z = ops.where(hf.constant(~CAUSAL), _c(-1e9), z)
    return ops.matmul(ops.softmax(z, axis=-1), v)


def v_input_mask(ops, c, q, k, v, mask):  # a mask that is a graph input, per (batch, key)
    z = _mm(ops, q, c.kt(ops, k)) + mask if ops is np else ops.add(_mm(ops, q, c.kt(ops, k)), mask)
    return _mm(ops, _sm(ops, z), v)


def v_plain_3d(ops, c, q, k, v):         # no head axis, no scale, no mask
    return _mm(ops, _sm(ops, _mm(ops, q, c.kt(ops, k))), v)


def v_matrices(ops, c, q, k, v):         # 2-D: one head, one sequence
    z = _mm(ops, q, c.kt(ops, k))
    z = z / 3.0 if ops is np else ops.div(z, _c(3.0))
    return _mm(ops, _sm(ops, z), v)


FIRES = {
    "div_add": (v_div_add, {}),
    "mul_first": (v_mul_first, {}),
    "scale_after_mask": (v_scale_after_mask, {}),
    "causal_select": (v_causal_select, {}),
    "inverted_select": (v_inverted_select, {}),
    "input_mask": (v_input_mask, {"extra": ((B, 1, M, N),)}),
    "plain_3d": (v_plain_3d, {"q_shape": (H, M, D), "k_shape": (H, N, D), "v_shape": (H, N, DV)}),
    "matrices": (v_matrices, {"q_shape": (M, D), "k_shape": (N, D), "v_shape": (N, DV)}),
}


@pytest.mark.parametrize("name", sorted(FIRES))
def test_the_rule_fires_on_the_pattern(name, rng):
    build, shapes = FIRES[name]
    graph, _, _ = _graph_and_reference(build, rng, **shapes)
    names = _ops_after_rewrite(graph)
    assert names.count("attention") == 1 and "softmax" not in names, names
    assert names.count("matmul") == 0 and "isnan" not in names, names


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(FIRES))
def test_the_rewritten_graph_matches_float64(name, target, fx, rng):
    build, shapes = FIRES[name]
    graph, case, want = _graph_and_reference(build, rng, **shapes)
    _check(graph, case, want, target, fx)


# ------------------------------------------------------------------ near-misses

def n_softmax_axis(ops, c, q, k, v):     # softmax over the queries, not the keys
    return _mm(ops, _sm(ops, _mm(ops, q, c.kt(ops, k)), axis=-2), v)


def n_vector_scale(ops, c, q, k, v):     # a per-key scale: not one value
    scale = np.linspace(0.5, 1.5, N).astype(np.float32)
    z = _mm(ops, q, c.kt(ops, k))
    z = z * scale if ops is np else ops.mul(z, _c(scale))
    return _mm(ops, _sm(ops, z), v)


def n_widening_mask(ops, c, q, k, v):    # a mask that broadcasts the scores up: [1,H,M,N] + [B,H,M,N]
    mask = np.random.default_rng(3).standard_normal((B, H, M, N)).astype(np.float32)
    z = _mm(ops, q, c.kt(ops, k))
    z = z + mask if ops is np else ops.add(z, _c(mask))
    return _mm(ops, _sm(ops, z), v)


def n_relu_between(ops, c, q, k, v):     # an operator the pattern does not know
    z = _mm(ops, q, c.kt(ops, k))
    z = np.maximum(z, 0.0) if ops is np else ops.relu(z)
    return _mm(ops, _sm(ops, z), v)


def n_vector_fill(ops, c, q, k, v):      # where(causal, z, per-key fill): the fill is not one value
    fill = -np.arange(1, N + 1, dtype=np.float32)
    z = _mm(ops, q, c.kt(ops, k))
    if ops is np:
        return _softmax(np.where(CAUSAL, z, fill)) @ v
    return ops.matmul(ops.softmax(ops.where(hf.constant(CAUSAL), z, _c(fill)), axis=-1), v)


NEAR_MISSES = {
    "softmax_axis": (n_softmax_axis, {}),
    "vector_scale": (n_vector_scale, {}),
    "widening_mask": (n_widening_mask, {"q_shape": (1, H, M, D), "k_shape": (1, H, N, D), "v_shape": (1, H, N, DV)}),
    "relu_between": (n_relu_between, {}),
    "vector_fill": (n_vector_fill, {}),
}


@pytest.mark.parametrize("target", ["evaluator", "cpu"])
@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_are_left_alone_and_still_right(name, target, fx, rng):
    build, shapes = NEAR_MISSES[name]
    graph, case, want = _graph_and_reference(build, rng, **shapes)
    names = _ops_after_rewrite(graph)
    assert "attention" not in names and "softmax" in names, names
    _check(graph, case, want, target, fx)


def test_probabilities_read_elsewhere_stay_computed(rng, fx):
    """The softmax is also a graph output: the rule still fires, the softmax stays for
    that reader, and both outputs are right."""
    case = Case(rng)
    q, k, v = case.symbols
    p = hf.ops.softmax(hf.ops.matmul(q, case.kt(hf.ops, k)), axis=-1)
    graph = hf.trace([hf.ops.matmul(p, v), p], inputs=case.symbols)
    names = _ops_after_rewrite(graph)
    assert names.count("attention") == 1 and names.count("softmax") == 1, names
    qv, kv, vv = (x.astype(np.float64) for x in case.values)
    pv = _softmax(qv @ np.swapaxes(kv, -1, -2))
    fn = hf.compile(graph, target="cpu")
    got = fn(*case.values)
    np.testing.assert_allclose(got[0], pv @ vv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], pv, rtol=1e-4, atol=1e-6)
