"""bench/fusion.py's measure of a compiled graph: kernels launched and bytes moved
(every launched kernel's buffers counted in full), on a chain whose answer is known:
relu then exp of a [5, 7] float32 tensor is two kernels moving 4 buffers of 140 bytes
unfused, one kernel moving 2 fused; and a rule the bench switches off
(``extension.rules_off``) does not fire."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

import hidet_framework as hf
from hidet_framework.extension import plugin_host, rules_off, rules_switched_off

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "fusion.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_fusion", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_launches_and_bytes_of_a_known_chain(fx):
    fx.need_target("cpu")
    bench = _bench()
    x = hf.symbol((5, 7), "float32")
    graph = hf.trace(hf.ops.exp(hf.ops.relu(x)), inputs=[x])
    assert bench.traffic(hf.compile(graph, target="cpu", fusion=False)) == (2, 4 * 5 * 7 * 4)
    assert bench.traffic(hf.compile(graph, target="cpu")) == (1, 2 * 5 * 7 * 4)


def test_the_benchs_rules_are_registered_names():
    """Every rule the bench switches off is registered (`rules_off` would refuse it)."""
    bench = _bench()
    for _, off in bench.CONFIGS.values():
        with rules_off(*off):
            assert rules_switched_off() == frozenset(off)


def test_rules_off_keeps_the_attention_rule_from_firing(fx, rng):
    """`rules_off` (the bench's switch) in a compile: no attention operator, the same
    values; a rule handed to the engine directly still fires inside the block."""
    fx.need_target("cpu")
    from hidet_framework.graph.passes.base import GraphPassContext
    from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns

    q, kt, v = hf.symbol((2, 5, 4), "float32"), hf.symbol((2, 4, 7), "float32"), hf.symbol((2, 7, 3), "float32")
    graph = hf.trace(hf.ops.matmul(hf.ops.softmax(hf.ops.matmul(q, kt), axis=-1), v), inputs=[q, kt, v])
    with rules_off("fuse_attention"):
        off = hf.compile(graph, target="cpu", fusion=False)
        given = rewrite_patterns(graph, GraphPassContext(rewrite_rules=[plugin_host().passes["fuse_attention"]]))
    on = hf.compile(graph, target="cpu", fusion=False)
    assert [op.name for op in on.graph.nodes] == ["attention"] == [op.name for op in given.nodes]
    assert "attention" not in [op.name for op in off.graph.nodes] and "softmax" in [op.name for op in off.graph.nodes]
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (q, kt, v)]
    np.testing.assert_allclose(on(*arrays), off(*arrays), rtol=1e-5, atol=1e-6)
