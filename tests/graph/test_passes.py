"""Graph passes before/after on small graphs of dummy operators."""
from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import hookimpl
from hidet_framework.graph import FlowGraph
from hidet_framework.graph.passes import (
    GRAPH_PASSES, GraphPassContext, GraphRewriteError, eliminate_common_subexpressions,
    eliminate_dead_code, fold_constants, rewrite_patterns, run_graph_passes,
)
from hidet_framework.runtime.evaluate_task import interpret_task


def names(graph: FlowGraph) -> list[str]:
    return [op.name for op in graph.nodes]


def run(graph: FlowGraph, *arrays):
    """The graph's value, by the IR evaluator (no compiler needed)."""
    return hf.compile(graph, target="evaluator")(*arrays)


# ------------------------------------------------------------------ fold_constants

def test_fold_constants_replaces_constant_subgraphs(dummy, rng):
    x = hf.symbol((2, 3), "float32", name="x")
    w_value = rng.standard_normal((2, 3)).astype(np.float32)
    w = hf.constant(w_value, name="w")
    y = dummy.add(x, dummy.scale(dummy.scale(w, 2.0), 3.0))
    g = hf.trace(y, inputs=[x])
    before = list(g.nodes)
    assert names(fold_constants(g, GraphPassContext())) == ["scale", "scale", "add"]  # no evaluator: no folding
    ctx = GraphPassContext(evaluate=interpret_task)
    folded = fold_constants(g, ctx)
    assert names(folded) == ["add"]
    assert list(g.nodes) == before  # the input graph is untouched
    weight = folded.nodes[0].inputs[1]
    assert weight.is_constant()
    np.testing.assert_allclose(weight.storage, w_value * 6.0, rtol=1e-6)
    assert ctx.stats["fold_constants"]["folded"] == 2
    xv = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(run(folded, xv), xv + w_value * 6.0, rtol=1e-6)


def test_fold_constants_keeps_what_it_cannot_evaluate(dummy):
    x = hf.symbol((4,), "float32")
    y = dummy.add(x, dummy.scale(hf.constant(np.ones(4, np.float32))))
    g = hf.trace(y, inputs=[x])
    ctx = GraphPassContext(evaluate=lambda task, arrays: None)
    assert names(fold_constants(g, ctx)) == ["scale", "add"]
    assert ctx.stats["fold_constants"]["not_evaluable"] == 1


def test_interpreter_refuses_big_tasks(dummy):
    big = dummy.scale(hf.constant(np.ones(1 << 15, np.float32)))
    assert interpret_task(big.producer.task, [np.ones(1 << 15, np.float32)]) is None


# ------------------------------------------------------------------ dead code

def test_eliminate_dead_code_drops_unreachable_operators(dummy):
    x = hf.symbol((3,), "float32")
    y = dummy.scale(x)
    dead = dummy.scale(x, 5.0)
    g = hf.trace(y, inputs=[x])
    # a graph carrying an operator no output depends on (as a buggy pass could leave)
    g.nodes = g.nodes + [dead.producer]
    ctx = GraphPassContext()
    clean = eliminate_dead_code(g, ctx)
    assert [op.attributes["factor"] for op in clean.nodes] == [2.0]
    assert ctx.stats["eliminate_dead_code"]["removed"] == 1
    assert clean.inputs == g.inputs  # unused inputs stay: they are the call signature


# ------------------------------------------------------------------ CSE

def test_cse_merges_equal_operators_only(dummy, rng):
    x = hf.symbol((2, 2), "float32")
    a, b, c = dummy.scale(x, 2.0), dummy.scale(x, 2.0), dummy.scale(x, 3.0)
    y = dummy.add(dummy.add(a, b), c)
    g = hf.trace(y, inputs=[x])
    ctx = GraphPassContext()
    merged = eliminate_common_subexpressions(g, ctx)
    assert sorted(op.attributes.get("factor", 0) for op in merged.nodes if op.name == "scale") == [2.0, 3.0]
    first_add = next(op for op in merged.nodes if op.name == "add")
    assert first_add.inputs[0] is first_add.inputs[1]
    assert ctx.stats["eliminate_common_subexpressions"]["merged"] == 1
    xv = rng.standard_normal((2, 2)).astype(np.float32)
    np.testing.assert_allclose(run(merged, xv), run(g, xv), rtol=1e-6)


def test_cse_merges_equal_constants_then_their_users(dummy):
    x = hf.symbol((3,), "float32")
    w1, w2 = hf.constant([1.0, 2.0, 3.0]), hf.constant([1.0, 2.0, 3.0])
    y = dummy.add(dummy.add(x, w1), dummy.add(x, w2))
    merged = eliminate_common_subexpressions(hf.trace(y, inputs=[x]))
    assert len(merged.constants()) == 1
    assert names(merged) == ["add", "add"]


# ------------------------------------------------------------------ rewrites

class MergeScales:
    """scale(scale(x, a), b) -> scale(x, a * b)."""

    point = "graph_rewrite"
    op_names = ("scale",)
    name = "merge_scales"

    def __init__(self, scale):
        self.scale = scale

    def rewrite(self, op):
        inner = op.inputs[0].producer
        if inner is None or inner.name != "scale":
            return None
        return [self.scale(inner.inputs[0], inner.attributes["factor"] * op.attributes["factor"])]


def test_rewrite_reaches_a_fixpoint(dummy, rng):
    x = hf.symbol((5,), "float32")
    y = x
    for factor in (2.0, 3.0, 0.5, 4.0):
        y = dummy.scale(y, factor)
    g = hf.trace(dummy.add(y, x), inputs=[x])
    ctx = GraphPassContext(rewrite_rules=[MergeScales(dummy.scale)], evaluate=interpret_task)
    rewritten = rewrite_patterns(g, ctx)
    assert names(rewritten) == ["scale", "add"]
    assert rewritten.nodes[0].attributes["factor"] == 12.0
    assert names(g) == ["scale"] * 4 + ["add"]
    xv = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(run(rewritten, xv), xv * 13.0, rtol=1e-6)


def test_rewrite_rules_come_from_plugins(dummy, isolated_plugin_host):
    plugin = types.ModuleType("rules_plugin")
    plugin.register_passes = hookimpl(lambda register: register("merge_scales", MergeScales(dummy.scale)))
    x = hf.symbol((3,), "float32")
    g = hf.trace(dummy.scale(dummy.scale(x)), inputs=[x])
    with isolated_plugin_host.temporary_plugin(plugin, "rules"):
        assert names(rewrite_patterns(g)) == ["scale"]
    assert names(rewrite_patterns(g)) == ["scale", "scale"]


def test_rewrite_rejects_a_replacement_of_another_shape(dummy):
    class Bad:
        point, op_names, name = "graph_rewrite", ("scale",), "bad"

        def rewrite(self, op):
            return [hf.symbol((7,), "float32")]

    x = hf.symbol((3,), "float32")
    g = hf.trace(dummy.scale(x), inputs=[x])
    with pytest.raises(GraphRewriteError, match=r"rule 'bad'.*f32\[3\].*f32\[7\]"):
        rewrite_patterns(g, GraphPassContext(rewrite_rules=[Bad()]))


def test_rewrite_rules_that_undo_each_other_stop_at_the_bound(dummy):
    class Flip:
        """scale(x, f) -> scale(x, -f): always fires, never settles."""

        point, op_names, name = "graph_rewrite", ("scale",), "flip"

        def rewrite(self, op):
            return [dummy.scale(op.inputs[0], -op.attributes["factor"])]

    x = hf.symbol((3,), "float32")
    g = hf.trace(dummy.scale(x, 2.0), inputs=[x])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = rewrite_patterns(g, GraphPassContext(rewrite_rules=[Flip()], max_rewrite_rounds=5))
    assert any("fixpoint" in str(w.message) and "flip" in str(w.message) for w in caught)
    assert out.nodes[0].attributes["factor"] == -2.0  # 5 flips


# ------------------------------------------------------------------ pipeline

def test_pipeline_order_and_result(dummy, rng):
    assert [p.__name__ for p in GRAPH_PASSES] == [
        "rewrite_patterns", "fold_constants", "eliminate_common_subexpressions", "eliminate_dead_code"]
    x = hf.symbol((2, 3), "float32")
    w = hf.constant(rng.standard_normal((2, 3)).astype(np.float32))
    y = dummy.add(dummy.scale(dummy.scale(x, 2.0), 2.0), dummy.scale(w))
    y = dummy.add(y, dummy.scale(dummy.scale(x, 2.0), 2.0))
    g = hf.trace(y, inputs=[x])
    ctx = GraphPassContext(rewrite_rules=[MergeScales(dummy.scale)], evaluate=interpret_task)
    out = run_graph_passes(g, ctx)
    assert names(out) == ["scale", "add", "add"]
    xv = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(run(out, xv), run(g, xv), rtol=1e-5)
