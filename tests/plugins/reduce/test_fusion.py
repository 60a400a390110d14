"""Reductions are fusion anchors: elementwise producers are grafted onto their loads and
bijective consumers onto their stores, so residual add + layer norm + gelu runs as one
kernel on the CPU and on the GPU; a task whose reduction sits in an intermediate stage
is an anchor itself, never grafted as an injective producer or consumer."""
from __future__ import annotations

import math

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.graph import Operator

_erf = np.vectorize(math.erf)


def _gelu(v):
    return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))


def _ln(h, s, b, eps=1e-5):
    return (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + eps) * s + b


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_residual_add_layer_norm_gelu_is_one_kernel(dtype, target, rand, check):
    x, res = hf.symbol((67, 768), dtype), hf.symbol((67, 768), dtype)
    s, b = hf.symbol((768,), dtype), hf.symbol((768,), dtype)
    y = hf.ops.gelu(hf.ops.layer_norm(hf.ops.add(x, res), s, b))
    arrays = [rand(t.shape, dtype) for t in (x, res, s, b)]
    (got,), fn = check.run_graph([y], [x, res, s, b], arrays, target)
    report = fn.fusion_report()
    assert len(report) == 1 and report[0].status == "fused" and report[0].launches == 1, report
    assert report[0].operators == "add -> [layer_norm] -> gelu"
    assert report[0].scheduled_by.startswith("reduce."), report  # the template, not the auto-scheduler
    e = [a.astype(np.float64) for a in arrays]
    check.assert_close(got, _gelu(_ln(e[0] + e[1], e[2], e[3])), dtype, None, "fused add + layer_norm + gelu")


def test_scaled_softmax_and_reduction_epilogues(target, rand, check):
    """A producer before softmax and a consumer after a row sum fuse as well."""
    x, m = hf.symbol((33, 257)), hf.symbol((33, 257))
    p = hf.ops.softmax(hf.ops.mul(hf.ops.add(x, m), 0.125))
    q = hf.ops.relu(hf.ops.reduce_sum(hf.ops.exp(x), -1))
    arrays = [rand(t.shape) for t in (x, m)]
    (gp, gq), fn = check.run_graph([p, q], [x, m], arrays, target)
    fused = [r for r in fn.fusion_report() if r.status == "fused"]
    assert {r.operators for r in fused} == {"add -> mul -> [softmax]", "exp -> [reduce_sum] -> relu"}, fn.fusion_report()
    assert all(r.launches == 1 for r in fused)
    e = [a.astype(np.float64) for a in arrays]
    z = np.exp((e[0] + e[1]) * 0.125)
    check.assert_close(gp, z / z.sum(-1, keepdims=True), "float32")
    check.assert_close(gq, np.maximum(np.exp(e[0]).sum(-1), 0), "float32")


def _centered(x):
    """A test operator whose reduction is in an intermediate stage: x - mean(x) by row.
    Its output stage is elementwise, yet the task is not injective."""
    xin = tensor_input("x", x.dtype, x.shape)
    n = x.shape[-1]
    mean = compute("mean", x.shape[:1], lambda i: reduce([n], lambda r: xin[i, r], "mean"))
    out = compute("y", x.shape, lambda i, j: xin[i, j] - mean[i])
    task = Task("centered", [xin], [out])
    return Operator("centered", [x], task).outputs[0]


def test_a_reduction_in_an_intermediate_stage_makes_an_anchor(target, rand, check):
    from hidet_framework.fusion import FusionError
    from hidet_framework.fusion.graft_prologue import graft_producer

    x, w = hf.symbol((9, 31)), hf.symbol((9, 31))
    c = _centered(hf.ops.relu(x))
    assert not c.producer.task.is_injective()
    y = hf.ops.add(hf.ops.tanh(c), w)  # tanh and add are bijective consumers of c
    z = hf.ops.exp(_centered(hf.ops.abs(w)))
    arrays = [rand(t.shape) for t in (x, w)]
    (gy, gz), fn = check.run_graph([y, z], [x, w], arrays, target)
    described = {r.operators for r in fn.fusion_report()}
    assert "relu -> [centered] -> tanh -> add" in described, described
    assert "abs -> [centered] -> exp" in described, described
    e = [a.astype(np.float64) for a in arrays]
    r = np.maximum(e[0], 0)
    check.assert_close(gy, np.tanh(r - r.mean(-1, keepdims=True)) + e[1], "float32")
    a = np.abs(e[1])
    check.assert_close(gz, np.exp(a - a.mean(-1, keepdims=True)), "float32")
    # and the engine refuses to graft it as if it were injective
    with pytest.raises(FusionError, match="not a single-output injective task"):
        graft_producer(None, ("member", 0, 0), c.producer.task, [("input", 0)])


def test_unfused_and_fused_graphs_agree(rand, check):
    x, res = hf.symbol((5, 7, 96)), hf.symbol((5, 7, 96))
    s = hf.symbol((96,))
    y = hf.ops.mul(hf.ops.rms_norm(hf.ops.sub(x, res), s), 2.0)
    arrays = [rand(t.shape) for t in (x, res, s)]
    (fused,), fn = check.run_graph([y], [x, res, s], arrays, "cpu")
    (plain,), _ = check.run_graph([y], [x, res, s], arrays, "cpu", fusion=False)
    assert [r.launches for r in fn.fusion_report()] == [1]
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5)
