"""The graphs of tests/graph/test_ops_graph.py (the 20-op conv/pool/gelu graph and the
conv2d-rewrite + dense head) compiled fused and unfused: same answers as the float64
reference, fewer launches fused. Prints the launch counts and the fusion report."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import hidet_framework as hf

# cuda: runs on the lent GPU machine (marked; skipped with the reason elsewhere)
TARGETS = ["cpu", "evaluator", pytest.param("cuda", marks=pytest.mark.cuda)]


def _ops_graph_module():
    # test modules cannot import each other under importlib mode: load it by path
    path = pathlib.Path(__file__).resolve().parents[1] / "graph" / "test_ops_graph.py"
    spec = importlib.util.spec_from_file_location("ops_graph_for_fusion", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("target", TARGETS)
def test_twenty_op_graph(target, fx, rng, capsys):
    fx.need_target(target)
    fx.need_ops("conv2d", "relu", "add", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "gelu", "reshape",
                "mul", "sub", "tanh")
    outputs, inputs, reference = _ops_graph_module().build(rng)
    graph = hf.trace(outputs, inputs=inputs)
    fused = hf.compile(graph, target=target)
    unfused = hf.compile(graph, target=target, fusion=False)
    xv = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)
    for fn in (fused, unfused):
        for got, want in zip(fn(xv), reference(xv)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert fused.num_launches < unfused.num_launches
    assert all(r.status in ("fused", "single") for r in fused.fusion_report())
    assert fused.memory_report().peak_bytes <= unfused.memory_report().peak_bytes
    with capsys.disabled():
        print(f"\n[{target}] {len(graph.nodes)} ops traced: {unfused.num_launches} launches unfused, "
              f"{fused.num_launches} fused; peak {unfused.memory_report().peak_bytes} -> "
              f"{fused.memory_report().peak_bytes} bytes")
        for row in fused.fusion_report():
            print(f"    {row}")


@pytest.mark.parametrize("target", TARGETS)
def test_conv_rewrite_and_dense_head(target, fx, rng):
    fx.need_target(target)
    fx.need_ops("matmul", "conv2d", "reshape", "add", "gelu")
    m = _ops_graph_module()
    ops = hf.ops
    w, b = rng.standard_normal((4, 3, 3, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    wd = rng.standard_normal((4 * 5 * 5, 7)).astype(np.float32)
    x = hf.symbol((1, 3, 5, 5), "float32")
    c = ops.conv2d(x, hf.constant(w), hf.constant(b), padding=1)
    y = ops.gelu(ops.add(ops.matmul(ops.reshape(c, [1, 100]), hf.constant(wd)), hf.constant(np.ones((1, 7), np.float32))))
    fused, unfused = fx.check(target, [y], [x],
                              lambda xv: [m.gelu_ref(m.conv2d_ref(xv, w, b, padding=1).reshape(1, 100) @ wd + 1.0)],
                              rng, rtol=1e-4, atol=1e-4)
    assert fused.num_launches < unfused.num_launches
