"""Horizontal matmul fusion and split-to-slices (hidet_plugin_ops/rules_horizontal.py),
and the rewrite engine's ``needs_uses`` protocol they use (graph/passes/rewrite_patterns.py).

What must fuse: the matmuls reading one input with constant weights become one matmul
on the weights side by side (their constant biases with it), each old product a
slice; a split whose pieces each feed one injective reader becomes slices. What must
not: matmuls on other inputs, a computed or batched weight, the input used as a weight,
a bias read twice, over rows, or returned, a split piece read twice or returned.
Every graph is compiled (evaluator and cpu, fused and unfused) and checked against
float64 numpy on fresh inputs (odd and prime sizes; on cpu the outputs are poisoned
first), and the launches are counted with the rule on and off."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import points, rules_off
from hidet_framework.fusion import FUSION_PASSES
from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes

from .run_poisoned import run_poisoned

TARGETS = ["evaluator", "cpu"]
M, K = 13, 24  # odd rows; widths below are primes


def _w(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.2


def _passes(outputs, inputs):
    graph = hf.trace(list(outputs), inputs=list(inputs))
    return run_graph_passes(graph, GraphPassContext(target="cpu"), list(GRAPH_PASSES))


def _names(graph):
    return [op.name for op in graph.nodes]


def _check(target, outputs, inputs, reference, rng, fx, rtol=1e-4, atol=1e-5):
    fx.need_target(target)
    graph = hf.trace(list(outputs), inputs=list(inputs))
    for fusion in (True, False):
        fn = hf.compile(graph, target=target, fusion=fusion)
        arrays = [rng.standard_normal(t.shape).astype(t.dtype.numpy_name) for t in inputs]
        want = reference(*[a.astype(np.float64) for a in arrays])
        for got, w in zip(run_poisoned(fn, graph.outputs, arrays, target), want):
            np.testing.assert_allclose(got, w, rtol=rtol, atol=atol)


def _qkv_block(rng, widths=(7, 11, 5), biased=(True, False, True)):
    """BERT's projections in small: x @ W_i (+ b_i), each followed by a head split."""
    x = hf.symbol((1, M, K), "float32")
    ws = [_w(rng, 1, K, n) for n in widths]
    bs = [_w(rng, n) if b else None for n, b in zip(widths, biased)]
    outs = []
    for w, b, n in zip(ws, bs, widths):
        y = hf.ops.matmul(x, hf.constant(w))
        if b is not None:
            y = hf.ops.add(y, hf.constant(b))
        outs.append(hf.ops.transpose(hf.ops.reshape(y, [1, M, n, 1]), [0, 2, 1, 3]))

    def reference(xa):
        res = []
        for w, b, n in zip(ws, bs, widths):
            y = xa @ w.astype(np.float64) + (0.0 if b is None else b.astype(np.float64))
            res.append(y.reshape(1, M, n, 1).transpose(0, 2, 1, 3))
        return res

    return outs, [x], reference


def test_the_projections_become_one_matmul_and_slices(rng):
    outs, inputs, _ = _qkv_block(rng)
    names = _names(_passes(outs, inputs))
    assert names.count("matmul") == 1 and names.count("slice") == 3 and names.count("add") == 1
    with rules_off("fuse_horizontal_matmul"):
        assert _names(_passes(outs, inputs)).count("matmul") == 3
    (wide,) = [op for op in _passes(outs, inputs).nodes if op.name == "matmul"]
    assert wide.outputs[0].shape[-1] == 7 + 11 + 5 and wide.inputs[1].is_constant()


@pytest.mark.parametrize("target", TARGETS)
def test_the_fused_projections_match_float64(target, rng, fx):
    outs, inputs, reference = _qkv_block(rng)
    _check(target, outs, inputs, reference, rng, fx)


@pytest.mark.parametrize("target", TARGETS)
def test_the_slices_are_grafted_not_copied(target, rng, fx):
    """Fused: the wide matmul with the bias add as its epilogue, and the three slices
    with their head splits grafted into the one kernel reading them: 2 kernels, where
    the rule off gives 3 (each product stored by its matmul's kernel, the last one
    taking the elementwise reader as its epilogue)."""
    fx.need_target(target)
    outs, inputs, reference = _qkv_block(rng, widths=(7, 7, 7), biased=(True, True, True))
    y = hf.ops.add(hf.ops.relu(outs[0]), hf.ops.mul(hf.ops.exp(outs[1]), outs[2]))
    graph = hf.trace([y], inputs=inputs)
    fused = run_graph_passes(graph, GraphPassContext(target="cpu"), list(GRAPH_PASSES) + list(FUSION_PASSES))
    groups = [[m.name for m in op.attributes["fusion_group"].members] for op in fused.nodes]
    assert groups[0] == ["matmul", "add"] and groups[1].count("slice") == 3 and len(groups) == 2
    on = hf.compile(graph, target=target)
    with rules_off("fuse_horizontal_matmul"):
        off = hf.compile(graph, target=target).num_launches
    assert (on.num_launches, off) == (2, 3)

    def want(xa):
        q, k, v = reference(xa)
        return [np.maximum(q, 0) + np.exp(k) * v]

    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
    got = run_poisoned(on, graph.outputs, arrays, target)
    np.testing.assert_allclose(got[0], want(arrays[0].astype(np.float64))[0], rtol=1e-4, atol=1e-5)


def _mixed(rng, variant):
    """Three readers of x of which some must stay out; returns (outputs, inputs,
    reference, expected matmul count after the rule)."""
    x = hf.symbol((M, K), "float32")
    w1, w2, w3 = _w(rng, K, 5), _w(rng, K, 7), _w(rng, K, 3)
    b1, r = _w(rng, 5), _w(rng, M, 7)
    extra = []
    y1 = hf.ops.add(hf.ops.matmul(x, hf.constant(w1)), hf.constant(b1))
    p2 = hf.ops.matmul(x, hf.constant(w2))
    if variant == "bias_over_rows":          # a [M, N] "bias": stays after the slice
        y2 = hf.ops.add(p2, hf.constant(r))
    elif variant == "bias_read_twice":       # the product is read by the add and a relu
        y2 = hf.ops.add(hf.ops.add(p2, hf.constant(r[0])), hf.ops.relu(p2))
    elif variant == "product_returned":      # the product is a graph output too
        y2 = hf.ops.add(p2, hf.constant(r[0]))
        extra = [p2]
    else:
        raise AssertionError(variant)
    y3 = hf.ops.matmul(x, hf.constant(w3))

    def reference(xa):
        p = xa @ w2.astype(np.float64)
        if variant == "bias_over_rows":
            second = p + r
        elif variant == "bias_read_twice":
            second = p + r[0] + np.maximum(p, 0)
        else:
            second = p + r[0]
        res = [xa @ w1 + b1, second, xa @ w3]
        return res + ([p] if extra else [])

    return [y1, y2, y3, *extra], [x], reference


@pytest.mark.parametrize("variant", ["bias_over_rows", "bias_read_twice", "product_returned"])
@pytest.mark.parametrize("target", TARGETS)
def test_readers_that_are_not_a_bias_stay_after_the_slice(variant, target, rng, fx):
    outs, inputs, reference = _mixed(rng, variant)
    graph = _passes(outs, inputs)
    assert _names(graph).count("matmul") == 1
    # the first member's bias went into the wide product; the second's reader stayed
    adds = [op for op in graph.nodes if op.name == "add"]
    assert any(op.inputs[0].producer is not None and op.inputs[0].producer.name == "slice" for op in adds)
    _check(target, outs, inputs, reference, rng, fx)


def _refused(rng, case):
    x = hf.symbol((M, K), "float32")
    w = hf.constant(_w(rng, K, 5))
    if case == "other_inputs":        # one matmul per input
        x2 = hf.symbol((M, K), "float32")
        return [hf.ops.matmul(x, w), hf.ops.matmul(x2, w)], [x, x2]
    if case == "computed_weight":     # the second weight is a graph input
        w2 = hf.symbol((K, 5), "float32")
        return [hf.ops.matmul(x, w), hf.ops.matmul(x, w2)], [x, w2]
    if case == "input_as_weight":     # x is the right operand of the second
        a = hf.symbol((3, M), "float32")
        return [hf.ops.matmul(x, w), hf.ops.matmul(a, x)], [x, a]
    if case == "batched_weight":      # [2, K, 5] weights: a batched product
        xb = hf.symbol((2, M, K), "float32")
        wb = hf.constant(_w(rng, 2, K, 5))
        return [hf.ops.matmul(xb, wb), hf.ops.matmul(xb, hf.constant(_w(rng, 2, K, 3)))], [xb]
    if case == "single":              # one matmul and an elementwise reader
        return [hf.ops.matmul(x, w), hf.ops.relu(x)], [x]
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["other_inputs", "computed_weight", "input_as_weight", "batched_weight", "single"])
def test_what_must_not_be_fused(case, rng, fx):
    outs, inputs = _refused(rng, case)
    before = _names(_passes(outs, inputs))
    with rules_off("fuse_horizontal_matmul"):
        assert _names(_passes(outs, inputs)) == before
    assert "slice" not in before and "concat" not in before
    graph = hf.trace(outs, inputs=inputs)
    fx.need_target("evaluator")
    fn = hf.compile(graph, target="evaluator")
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
    consts = [op.inputs[1] for op in _passes(outs, inputs).nodes if op.name == "matmul"]
    assert consts  # the graph still multiplies
    got = fn(*arrays)
    assert all(np.all(np.isfinite(g)) for g in got)


def test_the_same_matmuls_in_two_graphs_get_each_graph_s_own_wide_product(rng, fx):
    """The rule remembers the groups it built; the same matmuls traced into a second
    graph where a product is read only by its bias (returned as well in the first, so
    its bias stayed after the slice there) must get that bias in the second."""
    fx.need_target("evaluator")
    x = hf.symbol((M, K), "float32")
    w1, w2, b2 = _w(rng, K, 3), _w(rng, K, 5), _w(rng, 5) + 10
    p1, p2 = hf.ops.matmul(x, hf.constant(w1)), hf.ops.matmul(x, hf.constant(w2))
    y2 = hf.ops.add(p2, hf.constant(b2))
    hf.compile(hf.trace([p1, y2, p2], inputs=[x]), target="evaluator")
    fn = hf.compile(hf.trace([p1, y2], inputs=[x]), target="evaluator")
    xa = rng.standard_normal((M, K)).astype(np.float32)
    got = fn(xa)
    np.testing.assert_allclose(got[0], xa.astype(np.float64) @ w1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], xa.astype(np.float64) @ w2 + b2, rtol=1e-4, atol=1e-5)


def _split_block(rng, variant):
    x = hf.symbol((M, 3 * 7), "float32")
    pieces = hf.ops.split(x, [7, 7, 7], axis=1)
    ys = [hf.ops.relu(p) for p in pieces]
    if variant == "read_twice":
        ys[1] = hf.ops.add(ys[1], hf.ops.exp(pieces[1]))
    if variant == "reduced":  # a reduction reads the piece: its slice would be a kernel of its own
        ys[1] = hf.ops.reduce_sum(pieces[1], axes=[1], keepdims=True)
    outs = list(ys) + ([pieces[2]] if variant == "returned" else [])

    def reference(xa):
        parts = np.split(xa, 3, axis=1)
        res = [np.maximum(p, 0) for p in parts]
        if variant == "read_twice":
            res[1] = res[1] + np.exp(parts[1])
        if variant == "reduced":
            res[1] = parts[1].sum(axis=1, keepdims=True)
        return res + ([parts[2]] if variant == "returned" else [])

    return outs, [x], reference


@pytest.mark.parametrize("variant", ["plain", "read_twice", "returned", "reduced"])
@pytest.mark.parametrize("target", TARGETS)
def test_split_becomes_slices_only_where_each_piece_has_one_injective_reader(variant, target, rng, fx):
    outs, inputs, reference = _split_block(rng, variant)
    names = _names(_passes(outs, inputs))
    if variant == "plain":
        assert "split" not in names and names.count("slice") == 3
    else:
        assert names.count("split") == 1 and "slice" not in names
    _check(target, outs, inputs, reference, rng, fx)


def test_split_slices_fuse_into_their_readers(rng, fx):
    fx.need_target("cpu")
    outs, inputs, _ = _split_block(rng, "plain")
    graph = hf.trace(outs, inputs=inputs)
    on = hf.compile(graph, target="cpu").num_launches
    with rules_off("split_to_slices"):
        off = hf.compile(graph, target="cpu").num_launches
    # three relu kernels reading x, against the split's own launches (the auto-scheduler
    # gives one per piece) and three relus
    assert on == 3 and off > on, (on, off)


def test_the_engine_tells_a_rule_who_reads_a_tensor():
    """``needs_uses``: readers in graph order and graph outputs; None for a tensor this
    round replaced, and no reader whose inputs this round replaced (stale readers)."""
    from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns

    x = hf.symbol((3, 4), "float32")
    a = hf.ops.relu(x)
    b = hf.ops.exp(x)
    c = hf.ops.add(a, b)
    graph = hf.trace([c, a], inputs=[x])
    calls = []

    class Once:
        name, op_names, point, needs_uses = "spy", ("relu", "exp", "add"), points.GRAPH_REWRITE, True

        def rewrite(self, op, uses):  # fires once, on the relu of the first round
            if op.name == "relu" and not calls:
                calls.append(op)
                assert [r.name for r, _ in uses.readers(op.inputs[0])] == ["relu", "exp"]
                assert uses.is_output(op.outputs[0])  # `a` is returned
                return [hf.ops.relu(hf.ops.relu(op.inputs[0]))]
            if op.name == "add" and len(calls) == 1:
                calls.append(op)
                assert uses.readers(op.inputs[0]) is None  # the replaced relu output's replacement
                assert uses.readers(op.inputs[1]) == []  # the add read the replaced tensor: stale
            return None

    rewrite_patterns(graph, GraphPassContext(rewrite_rules=[Once()]))
    assert len(calls) == 2


@pytest.mark.cuda
def test_bert_attention_block_on_cuda_is_two_kernels_and_matches_float64(rng):
    """fp16 on the GPU: the three projections (odd widths: 3 heads of 8, sequence 13) as
    one matmul with the biases as its epilogue, then one attention kernel reading the
    three slices through its grafted head split; float64 reference, fresh inputs."""
    heads, d = 3, 8
    e = heads * d
    x = hf.symbol((1, M, e), "float16")
    ws = [_w(rng, 1, e, e).astype(np.float16) for _ in range(3)]
    bs = [_w(rng, e).astype(np.float16) for _ in range(3)]
    q, k, v = (hf.ops.transpose(hf.ops.reshape(hf.ops.add(hf.ops.matmul(x, hf.constant(w)), hf.constant(b)),
                                               [1, M, heads, d]), [0, 2, 1, 3]) for w, b in zip(ws, bs))
    c = hf.constant(np.float16(d ** -0.25))
    z = hf.ops.matmul(hf.ops.mul(q, c), hf.ops.mul(hf.ops.transpose(k, [0, 1, 3, 2]), c))
    y = hf.ops.reshape(hf.ops.transpose(hf.ops.matmul(hf.ops.softmax(z, axis=-1), v), [0, 2, 1, 3]), [1, M, e])
    fn = hf.compile(hf.trace(y, inputs=[x]), target="cuda")
    assert fn.num_launches == 2, fn.fusion_report()
    xa = rng.standard_normal((1, M, e)).astype(np.float16)
    qa, ka, va = ((xa.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64))
                  .reshape(1, M, heads, d).transpose(0, 2, 1, 3) for w, b in zip(ws, bs))
    s = qa @ ka.transpose(0, 1, 3, 2) / np.sqrt(d)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = ((p / p.sum(-1, keepdims=True)) @ va).transpose(0, 2, 1, 3).reshape(1, M, e)
    np.testing.assert_allclose(np.asarray(fn(xa), np.float64), want, rtol=2e-2, atol=2e-2)


@st.composite
def _readers(draw):
    """2..4 matmuls of one input with constant weights of drawn widths, each with a drawn
    follower: nothing, a constant bias (vector or [1, N]), a bias over rows, a bias and a
    second reader of the product, or the product returned as well; plus maybe a matmul
    whose weight is a graph input, which must stay out."""
    k = draw(st.integers(2, 4))
    widths = draw(st.lists(st.integers(1, 6), min_size=k, max_size=k))
    follow = draw(st.lists(st.sampled_from(["none", "bias", "bias2d", "rows", "twice", "returned"]),
                           min_size=k, max_size=k))
    return widths, follow, draw(st.booleans()), draw(st.integers(1, 5)), draw(st.integers(0, 2 ** 31 - 1))


@given(_readers())
@settings(max_examples=25, deadline=None)
def test_property_every_drawn_group_matches_float64_on_the_evaluator(case):
    widths, follow, computed, rows, seed = case
    fx_rng = np.random.default_rng(seed)
    kk = 5
    x = hf.symbol((rows, kk), "float32")
    inputs, outs, refs = [x], [], []
    for n, f in zip(widths, follow):
        w = _w(fx_rng, kk, n)
        p = hf.ops.matmul(x, hf.constant(w))
        ref = (lambda w: lambda xa: xa @ w)(w.astype(np.float64))
        if f in ("bias", "bias2d", "rows", "twice"):
            b = _w(fx_rng, *({"bias": (n,), "bias2d": (1, n), "rows": (rows, n), "twice": (n,)}[f]))
            y = hf.ops.add(p, hf.constant(b))
            ref = (lambda r, b: lambda xa: r(xa) + b)(ref, b.astype(np.float64))
            if f == "twice":
                y = hf.ops.add(y, hf.ops.relu(p))
                ref = (lambda r, w: lambda xa: r(xa) + np.maximum(xa @ w, 0))(ref, w.astype(np.float64))
            outs.append(y)
        else:
            outs.append(p)
            if f == "returned":
                outs.append(hf.ops.relu(p))
                refs.append(ref)
                ref = (lambda r: lambda xa: np.maximum(r(xa), 0))(ref)
        refs.append(ref)
    if computed:
        wi = hf.symbol((kk, 3), "float32")
        inputs.append(wi)
        outs.append(hf.ops.matmul(x, wi))
        refs.append(lambda xa, wa=None: None)  # filled below
    graph = _passes(outs, inputs)
    assert sum(op.name == "matmul" for op in graph.nodes) == 1 + bool(computed)
    fn = hf.compile(hf.trace(outs, inputs=inputs), target="evaluator")
    arrays = [fx_rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
    got = fn(*arrays)
    got = [got] if len(outs) == 1 else list(got)
    xa = arrays[0].astype(np.float64)
    want = [r(xa) for r in refs[:len(refs) - bool(computed)]]
    if computed:
        want.append(xa @ arrays[1].astype(np.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
