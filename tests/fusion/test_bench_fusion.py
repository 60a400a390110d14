"""bench/fusion.py's measure of a compiled graph: kernels launched and bytes moved
(every launched kernel's buffers counted in full), on a chain whose answer is known:
relu then exp of a [5, 7] float32 tensor is two kernels moving 4 buffers of 140 bytes
unfused, one kernel moving 2 fused; and a rule overridden by the bench's switch does
not fire."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

import hidet_framework as hf

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


def test_the_rules_off_switch_keeps_the_attention_rule_from_firing(fx, rng):
    fx.need_target("cpu")
    from hidet_framework.extension import temporary_plugin

    bench = _bench()
    q, kt, v = hf.symbol((2, 5, 4), "float32"), hf.symbol((2, 4, 7), "float32"), hf.symbol((2, 7, 3), "float32")
    graph = hf.trace(hf.ops.matmul(hf.ops.softmax(hf.ops.matmul(q, kt), axis=-1), v), inputs=[q, kt, v])
    with temporary_plugin(bench._RulesOff(["fuse_attention"]).plugin(), name="bench_fusion_rules_off"):
        off = hf.compile(graph, target="cpu", fusion=False)
    on = hf.compile(graph, target="cpu", fusion=False)
    assert [op.name for op in on.graph.nodes] == ["attention"]
    assert "attention" not in [op.name for op in off.graph.nodes] and "softmax" in [op.name for op in off.graph.nodes]
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (q, kt, v)]
    np.testing.assert_allclose(on(*arrays), off(*arrays), rtol=1e-5, atol=1e-6)
