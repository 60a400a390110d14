"""The conv2d → im2col + matmul rewrite rule: what it registers, when it fires, and
that the rewritten graph computes the same convolution."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.extension import hookimpl
from hidet_framework.graph import FlowGraph, symbol


def _reference_module():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("ops_test_pool_conv", os.path.join(here, "test_pool_conv_ops.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conv_reference, pads4 = _reference_module().conv_reference, _reference_module().pads4


class FakeMatmulPlugin:
    """A stand-in matmul operator ([M, K] x [K, N], or batched with equal batches),
    so this test does not depend on another plugin's progress."""

    @staticmethod
    def matmul(a, b):
        from hidet_framework.compute import Task, compute, reduce, tensor_input
        from hidet_framework.graph import Operator

        an, bn = tensor_input("a", a.dtype, a.shape), tensor_input("b", b.dtype, b.shape)
        k = a.shape[-1]
        if a.rank == 2:
            c = compute("c", [a.shape[0], b.shape[1]],
                        lambda i, j: reduce([k], lambda r: an[i, r] * bn[r, j], "sum"), dtype=a.dtype)
        else:
            c = compute("c", [a.shape[0], a.shape[1], b.shape[2]],
                        lambda g, i, j: reduce([k], lambda r: an[g, i, r] * bn[g, r, j], "sum"), dtype=a.dtype)
        return Operator("matmul", [a, b], Task("matmul", [an, bn], [c])).outputs[0]

    @hookimpl
    def register_operators(self, register):
        register("matmul", self.matmul)


def _real_matmul_plugin():
    try:
        import hidet_plugin_matmul
    except ImportError:
        return None
    # From the repository root, the distribution folder can shadow the package.
    return hidet_plugin_matmul if hasattr(hidet_plugin_matmul, "register_operators") else None


@pytest.fixture(params=["fake", "real"])
def matmul_plugin(request, ops_host):
    """A matmul operator registered next to the ops (the rule finds it through the
    registry, never by import): a stand-in, and the real hidet-plugin-matmul."""
    plugin = FakeMatmulPlugin() if request.param == "fake" else _real_matmul_plugin()
    if plugin is None:
        pytest.skip("hidet_plugin_matmul is not importable here")
    with ops_host.temporary_plugin(plugin, "matmul"):
        yield ops_host


def _rule(host):
    rules = [p for p in host.passes.passes_at("graph_rewrite") if p.name == "conv2d_to_matmul"]
    assert len(rules) == 1
    return rules[0]


def test_rule_is_registered_with_the_protocol(ops_host):
    rule = _rule(ops_host)
    assert rule.point == "graph_rewrite"
    assert rule.op_names == ("conv2d",)
    assert callable(rule.rewrite)
    assert ops_host.passes.provider("conv2d_to_matmul") == "ops"


def test_rule_declines_without_matmul(ops_host):
    assert "matmul" not in ops_host.operators
    y = ops.conv2d(symbol((1, 3, 5, 5)), symbol((2, 3, 3, 3)))
    assert _rule(ops_host).rewrite(y.producer) is None
    assert _rule(ops_host).rewrite(ops.relu(y).producer) is None  # not a conv2d


def _producers(t):
    names, stack, seen = [], [t], set()
    while stack:
        t = stack.pop()
        if t.producer is None or id(t.producer) in seen:
            continue
        seen.add(id(t.producer))
        names.append(t.producer.name)
        stack.extend(t.producer.inputs)
    return names


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", [
    ((2, 3, 6, 5), (4, 3, 3, 3), (1, 1), 1, (1, 1), 1, True),
    ((1, 4, 7, 6), (6, 2, 2, 3), (2, 1), (0, 1, 1, 0), (1, 2), 2, True),
    ((1, 3, 4, 4), (5, 3, 1, 1), (1, 1), 0, (1, 1), 1, False),
], ids=str)
def test_rewritten_graph_computes_the_convolution(case, dtype, matmul_plugin, rand, runner):
    xs, ws, stride, padding, dilation, groups, has_bias = case
    x, w = symbol(xs, dtype), symbol(ws, dtype)
    b = symbol((ws[0],), dtype) if has_bias else None
    y = ops.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    new, = _rule(matmul_plugin).rewrite(y.producer)
    assert new.shape == y.shape and new.dtype is y.dtype
    names = _producers(new)
    assert "matmul" in names and "conv2d" not in names
    pointwise = ws[2:] == (1, 1) and stride == (1, 1) and padding == 0
    assert ("im2col" in names) != pointwise  # a pointwise conv's input is its own window matrix
    a, wa = rand(xs, dtype, -1, 1), rand(ws, dtype, -1, 1)
    feed = {x: a, w: wa}
    ba = None
    if has_bias:
        ba = rand(b.shape, dtype)
        feed[b] = ba
    out, = runner.run_with_evaluator(new, feed)
    expected = conv_reference(a, wa, ba, stride, pads4(padding), dilation, groups)
    runner.assert_close(out, expected, dtype, tol=1e-2 if dtype == "float16" else 1e-5)


def test_engine_applies_the_rule(matmul_plugin, rand, runner):
    passes = pytest.importorskip("hidet_framework.graph.passes")
    if not hasattr(passes, "rewrite_patterns") and not hasattr(passes, "run_graph_passes"):
        pytest.skip("the pattern-rewrite engine is not there yet")
    from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns

    x, w = symbol((1, 2, 5, 5)), symbol((3, 2, 3, 3))
    y = ops.relu(ops.conv2d(x, w, padding=1))
    graph = rewrite_patterns(FlowGraph([x, w], [y]))
    names = [op.name for op in graph.nodes]
    assert "conv2d" not in names and "matmul" in names and names[-1] == "relu"
    a, wa = rand(x.shape), rand(w.shape)
    out, = runner.run_with_evaluator(graph.outputs[0], {x: a, w: wa})
    expected = np.maximum(conv_reference(a, wa, None, (1, 1), (1,) * 4, (1, 1), 1), 0)
    runner.assert_close(out, expected, "float32", tol=1e-5)
