"""The graph layer at its edges, without compiling: what tensors, constants, operators
and graphs refuse (and the messages), zero-size and 0-d shapes, the order operators
come in, how the rebuilder shares and replaces, how attributes compare, and what each
pass counts. Written to kill mutants of graph/ (issue 12)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.graph import FlowGraph, Operator, Tensor
from hidet_framework.graph.flow_graph import GraphError
from hidet_framework.graph.passes import (
    GraphPassContext, eliminate_common_subexpressions, eliminate_dead_code, fold_constants,
)
from hidet_framework.graph.passes.base import Rebuilder, attributes_key
from hidet_framework.graph.tensor import ShapeError, constant, symbol
from hidet_framework.ir import dtypes


def test_extents_must_be_non_negative_integers():
    assert symbol((0, 3)).size == 0 and symbol(()).size == 1 and symbol(()).rank == 0
    assert symbol((np.int64(4), 2)).shape == (4, 2) and type(symbol((np.int64(4),)).shape[0]) is int
    assert symbol((2**20, 2**12)).size == 2**32          # no int32 overflow in the size
    with pytest.raises(ShapeError, match="negative extent"):
        symbol((2, -1))
    for bad in (2.7, True, np.bool_(True), "3", None):
        with pytest.raises(ShapeError, match="is not an integer"):
            symbol((bad, 3))


def test_tensor_names_kinds_and_repr():
    x = symbol((2, 3), "float16", name="x")
    assert x.is_graph_input() and not x.is_constant() and x.dtype is dtypes.float16
    assert repr(x) == "Tensor(x: f16[2, 3], input)"
    t = Tensor((1,), "int8")
    assert t.name == f"t{t.uid}"
    c = constant([1, 2], name="c")
    assert c.is_constant() and not c.is_graph_input() and repr(c) == "Tensor(c: i64[2], const)"


def test_constants_keep_their_dtype_and_are_copied():
    assert constant([1.5, 2.0]).dtype is dtypes.float32                     # Python floats: float32
    assert constant(np.array([1.5], np.float64)).dtype is dtypes.float64    # an array keeps its dtype
    assert constant([1.5], dtype="float64").dtype is dtypes.float64
    bf = constant(np.array([0x3F80], np.uint16), dtype="bfloat16")
    assert bf.dtype is dtypes.bfloat16 and bf.storage.dtype == np.uint16
    zero_d = constant(np.float32(3.0))
    assert zero_d.shape == () and zero_d.storage.shape == ()
    source = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2]
    c = constant(source)
    assert c.storage.flags.c_contiguous and c.shape == (2, 2)
    source[0, 0] = 99.0
    assert c.storage[0, 0] == 0.0


def test_operator_checks_its_inputs(dummy):
    x = symbol((2, 3), name="x")
    op = dummy.scale(x).producer
    assert op.outputs[0].name == "scale_out0" and op.outputs[0].index == 0 and op.outputs[0].producer is op
    assert repr(op) == "scale(x)"
    with pytest.raises(ShapeError, match="the task takes 1 inputs, got 2"):
        Operator("scale", [x, x], op.task)
    with pytest.raises(TypeError, match="input 0 must be a Tensor, got ndarray"):
        Operator("scale", [np.zeros((2, 3))], op.task)
    with pytest.raises(ShapeError, match=r"input 0 is f32\[3, 2\], the task expects f32\[2, 3\]"):
        Operator("scale", [symbol((3, 2))], op.task)
    with pytest.raises(ShapeError, match=r"input 0 is f16\[2, 3\]"):
        Operator("scale", [symbol((2, 3), "float16")], op.task)


def test_graph_refusals(dummy):
    x, z = symbol((3,), name="x"), symbol((3,), name="z")
    y = dummy.add(x, z)
    with pytest.raises(GraphError, match="graph input 1 must be a symbol"):
        FlowGraph([x, y], [y])
    with pytest.raises(GraphError, match="graph input 0 must be a symbol"):
        FlowGraph([constant([1.0, 2.0, 3.0])], [y])
    with pytest.raises(GraphError, match="^the same tensor is given twice as a graph input$"):
        FlowGraph([x, z, x], [y])
    with pytest.raises(GraphError, match="outputs must be Tensors, got int"):
        FlowGraph([x, z], [3])
    with pytest.raises(GraphError, match="add reads .* not among the graph inputs"):
        FlowGraph([x], [y])
    with pytest.raises(GraphError, match="is a symbol that is not among the graph inputs"):
        FlowGraph([x], [z])
    g = FlowGraph([x, z], [x])            # an input returned as is
    assert g.nodes == [] and hf.trace(x, inputs=[x]).outputs == (x,)


def test_topological_order_and_constants(dummy):
    x = symbol((3,), name="x")
    w = constant(np.ones(3, np.float32), name="w")
    a = dummy.scale(x, 2.0)
    b = dummy.add(a, w)
    c = dummy.add(a, b)
    d = dummy.add(c, w)
    g = hf.trace([d, b], inputs=[x])
    order = [op for op in g.nodes]
    assert order == [a.producer, b.producer, c.producer, d.producer]
    assert g.constants() == [w]
    text = repr(g)
    assert text.splitlines()[0] == "FlowGraph(inputs=[Tensor(x: f32[3], input)])"
    assert text.splitlines()[-1] == f"  return {d.name}, {b.name}"
    assert f"  {a.name}: f32[3] = scale(x)" in text
    deep = x
    for _ in range(3000):                 # iterative: no recursion limit
        deep = dummy.scale(deep, 1.0)
    assert len(hf.trace(deep, inputs=[x]).nodes) == 3000


def test_rebuilder_shares_unchanged_operators(dummy):
    x = symbol((3,), name="x")
    y = dummy.scale(x)
    r = Rebuilder()
    assert r.operator(y.producer) is y.producer
    r.replace(x, x)                       # a tensor replaced by itself: nothing recorded
    assert r.resolve(x) is x and r.operator(y.producer) is y.producer
    x2, x3 = symbol((3,), name="x2"), symbol((3,), name="x3")
    r.replace(x, x2)
    r.replace(x2, x3)
    assert r.resolve(x) is x3             # chains resolve to the end
    new = r.operator(y.producer)
    assert new is not y.producer and new.inputs == (x3,) and new.outputs[0].name == y.name
    assert r.resolve(y) is new.outputs[0]
    g = hf.trace(y, inputs=[x])
    assert Rebuilder().graph(g).outputs == g.outputs


def test_attribute_keys_tell_kinds_apart():
    k = attributes_key
    assert k({"a": 1, "b": 2}) == k({"b": 2, "a": 1})
    assert k({"a": 1}) != k({"a": "1"}) and k({"a": 1}) != k({"a": True}) and k({"a": 1}) != k({"a": 1.0})
    assert k({"a": [1, 2]}) != k({"a": (1, 2)}) and k({"a": [1, 2]}) == k({"a": [1, 2]})
    assert k({"a": [1, 2]}) != k({"a": [1, 3]}) and k({"a": (2, 1)}) != k({"a": (1, 2)})  # paddings, strides
    assert k({"a": {"x": 1}}) != k({"a": {"y": 1}})                                      # keys count too
    assert k({"a": {"x": 1, "y": 2}}) == k({"a": {"y": 2, "x": 1}}) and k({"a": {"x": 1}}) != k({"a": {"x": 2}})
    arr = np.arange(4, dtype=np.int32)
    assert k({"a": arr}) == k({"a": arr.copy()})
    assert k({"a": arr}) != k({"a": arr.astype(np.int64)}) and k({"a": arr}) != k({"a": arr.reshape(2, 2)})
    assert k({"a": arr}) != k({"a": arr + 1})


def test_context_record_accumulates():
    ctx = GraphPassContext()
    ctx.record("p", a=1, b=2)
    ctx.record("p", a=3)
    assert ctx.stats == {"p": {"a": 4, "b": 2}} and ctx.max_rewrite_rounds == 16 and ctx.target is None


def test_fold_checks_what_the_evaluator_returns(dummy):
    x = symbol((3,), name="x")
    y = dummy.add(x, dummy.scale(constant(np.ones(3, np.float32), name="w"), 2.0))
    g = hf.trace(y, inputs=[x])
    for bad in (np.ones(4, np.float32), np.ones(3, np.float64)):
        with pytest.raises(RuntimeError, match="constant folding scale"):
            fold_constants(g, GraphPassContext(evaluate=lambda task, arrays, bad=bad: [bad]))
    ctx = GraphPassContext(evaluate=lambda task, arrays: [arrays[0] * 2.0])
    folded = fold_constants(g, ctx)
    w2 = folded.nodes[0].inputs[1]
    assert w2.is_constant() and w2.name.endswith("_folded") and (w2.storage == 2.0).all()
    assert ctx.stats["fold_constants"] == {"folded": 1, "not_evaluable": 0}


def test_dead_code_count_and_cse_counts(dummy):
    x = symbol((3,), name="x")
    w1 = constant(np.ones(3, np.float32), name="w1")
    w2 = constant(np.ones(3, np.float32), name="w2")
    w3 = constant(np.ones(3, np.float64).astype(np.float32) * 2, name="w3")
    a, b, c = dummy.add(x, w1), dummy.add(x, w2), dummy.add(x, w3)
    s1, s2 = dummy.scale(x, 2.0), dummy.scale(x, 3.0)
    out = dummy.add(dummy.add(a, b), dummy.add(c, dummy.add(s1, s2)))
    g = hf.trace(out, inputs=[x])
    ctx = GraphPassContext()
    merged = eliminate_common_subexpressions(g, ctx)
    assert ctx.stats["eliminate_common_subexpressions"] == {"merged": 1, "constants_merged": 1}
    assert len(merged.nodes) == len(g.nodes) - 1
    ctx2 = GraphPassContext()
    assert len(eliminate_dead_code(merged, ctx2).nodes) == len(merged.nodes)
    assert ctx2.stats["eliminate_dead_code"] == {"removed": 0}
    strided = constant(np.ones(3, np.float32))
    strided.storage = np.ones((3, 2), np.float32)[:, :1].reshape(3)  # a non-contiguous view
    assert not strided.storage.flags.c_contiguous
    d = dummy.add(dummy.add(x, strided), dummy.add(x, constant(np.ones(3, np.float32))))
    ctx3 = GraphPassContext()
    eliminate_common_subexpressions(hf.trace(d, inputs=[x]), ctx3)
    assert ctx3.stats["eliminate_common_subexpressions"]["constants_merged"] == 1


def test_python_operators_on_tensors():
    # each operator resolves the registered operator of its name, operands in order
    if not all(hasattr(hf.ops, n) for n in ("add", "sub", "mul", "div", "neg", "matmul")):
        pytest.skip("the ops plugin is not installed")
    x, y, w = symbol((3,), name="x"), symbol((3,), name="y"), symbol((3, 2), name="w")
    rng = np.random.default_rng()
    xv, yv = rng.uniform(1.0, 2.0, 3).astype(np.float32), rng.uniform(1.0, 2.0, 3).astype(np.float32)
    wv = rng.standard_normal((3, 2)).astype(np.float32)
    cases = [(x + y, xv + yv), (2.0 + x, 2.0 + xv), (x - y, xv - yv), (2.0 - x, 2.0 - xv), (x - 2.0, xv - 2.0),
             (x * y, xv * yv), (3.0 * x, 3.0 * xv), (x / y, xv / yv), (2.0 / x, 2.0 / xv), (x / 2.0, xv / 2.0),
             (-x, -xv)]
    for expr, want in cases:
        fn = hf.compile(hf.trace(expr, inputs=[x, y]), target="evaluator")
        np.testing.assert_allclose(fn(xv, yv), want, rtol=1e-6)
    fn = hf.compile(hf.trace(x @ w, inputs=[x, w]), target="evaluator")
    # a float32 dot product of mixed-sign terms may cancel, so the error is bounded by the
    # size of the terms (|x| @ |w|), not by the size of the result
    got, want = fn(xv, wv), xv.astype(np.float64) @ wv
    bound = 1e-6 * (np.abs(xv).astype(np.float64) @ np.abs(wv))
    assert np.all(np.abs(got - want) <= bound), (got, want, bound)


def test_given_passes_replace_the_default_pipeline_and_constants_get_default_names(dummy):
    from hidet_framework.graph.passes import run_graph_passes

    x = symbol((3,), name="x")
    w = constant(np.ones(3, np.float32))
    assert w.name == f"t{w.uid}"                          # no name given: the default one
    y = dummy.add(dummy.add(x, w), dummy.add(x, w))       # CSE would merge the two adds
    g = hf.trace(y, inputs=[x])
    ctx = GraphPassContext()
    assert run_graph_passes(g, ctx, passes=[]) is g and ctx.stats == {}
    assert len(run_graph_passes(g, GraphPassContext()).nodes) == 2


def test_rewrite_rules_run_only_for_their_targets(dummy):
    from hidet_framework.graph.passes import rewrite_patterns

    class DropScale:
        """scale(x) -> x, for the targets it names."""
        op_names = ("scale",)

        def __init__(self, targets):
            self.targets = targets

        def rewrite(self, op):
            return [op.inputs[0]]

    x = symbol((3,), name="x")
    g = hf.trace(dummy.add(dummy.scale(x), x), inputs=[x])
    for targets, target, kept in ((("cuda",), "cpu", 2), (("cuda",), "cuda", 1), (("cpu", "cuda"), "cpu", 1),
                                  (None, "cpu", 1), (("cuda",), None, 2)):
        rule = DropScale(targets)
        if targets is None:
            del rule.targets
        out = rewrite_patterns(g, GraphPassContext(rewrite_rules=[rule], target=target))
        assert len(out.nodes) == kept, (targets, target)
