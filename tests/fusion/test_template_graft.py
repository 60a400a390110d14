"""The grafted IR of real matmul template candidates (the CPU template, level-1 space,
a small prime shape) with a relu prologue and a bias + relu epilogue, lowered,
compiled and run on the CPU: the template's loads and stores take the graft."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework import driver
from hidet_framework.fusion import fuse_group
from hidet_framework.fusion import FUSION_PASSES
from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
from hidet_framework.fusion.partition_fusion_groups import FUSED_OPERATOR, GROUP_ATTRIBUTE

M, K, N = 13, 17, 11


def test_level1_candidates_with_prologue_and_epilogue(fx, rng):
    fx.need_target("cpu")
    fx.need_ops("matmul", "relu", "add")
    cpu_template = pytest.importorskip("hidet_plugin_matmul.cpu_template")
    from hidet_plugin_matmul.cpu_space import cpu_matmul_space

    x, w, bias = hf.symbol((M, K), "float32"), hf.symbol((K, N), "float32"), hf.symbol((N,), "float32")
    y = hf.ops.relu(hf.ops.add(hf.ops.matmul(hf.ops.relu(x), w), bias))
    graph = run_graph_passes(hf.trace(y, inputs=[x, w, bias]), GraphPassContext(), GRAPH_PASSES + FUSION_PASSES)
    (op,) = graph.nodes
    assert op.name == FUSED_OPERATOR
    group = op.attributes[GROUP_ATTRIBUTE]
    assert group.describe() == "relu -> [matmul] -> add -> relu"
    anchor = group.anchor_member

    cpu = driver.resolve_compile_target("cpu")
    target = cpu.target
    space = cpu_matmul_space(target, 1)
    assert 1 < len(space) <= 30
    picks = [space[0], space[len(space) // 2], space[-1]]  # a spread, to keep the test fast
    xv, wv, bv = (rng.standard_normal(t.shape).astype(np.float32) for t in (x, w, bias))
    want = np.maximum(np.maximum(xv.astype(np.float64), 0) @ wv + bv, 0)
    inputs = {t.uid: v for t, v in ((x, xv), (w, wv), (bias, bv))}
    for params in picks:
        scheduled = cpu_template.build_cpu_matmul(anchor.task.attributes, params, target)
        fused = fuse_group(scheduled, group)
        (fn,) = [f for f in fused.module.functions.values() if f.kind == "cpu_kernel"]  # + device helpers
        assert fn.name == scheduled.launches[0].function
        compiled = cpu.compile(op.task, fused)
        device = cpu.device
        out = device.from_numpy(np.full((M, N), np.nan, np.float32))  # poisoned: every element must be stored
        compiled.run([device.from_numpy(inputs[t.uid]) for t in op.inputs], [out])
        got = device.to_numpy(out)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"candidate {params}")
