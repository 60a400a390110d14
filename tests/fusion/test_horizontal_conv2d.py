"""Horizontal conv2d fusion (hidet_plugin_ops/rules_horizontal_conv.py, on the shared
machinery of rules_horizontal.py).

What must merge: conv2d siblings reading one input with constant weights and one
window (kernel size, stride, padding, dilation) become one conv2d on the weights
stacked along output channels (the biases with them, zeros for a member without),
each old output a channel slice; a relu read alone by every member goes onto the
wide output once. What must not: siblings of another stride or kernel size, a
computed weight, groups > 1, a conv on another input; a member read twice, returned,
or without the activation keeps its reader after the slice. Every graph is compiled
(evaluator and cpu; cuda in fp16) with the rule on and off,
fused and unfused, and checked against float64 numpy on fresh inputs with prime
channel counts and odd maps (on cpu the outputs are poisoned first)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
import pytest

import hidet_framework as hf
from hidet_framework.extension import rules_off
from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
from hidet_framework.graph.passes.rewrite_patterns import registered_rules

from .run_poisoned import run_poisoned

TARGETS = ["evaluator", "cpu"]
RULES = ("fuse_horizontal_conv2d", "fuse_horizontal_conv2d_cpu")   # cuda and the evaluator; the cpu
ENV = "HIDET_FRAMEWORK_HCONV"
C, H, W = 7, 5, 7  # prime channels, odd map (small: the evaluator interprets every element)


def _conv_np(x, w, b=None, stride=1, pad=0):
    """float64 cross-correlation through a sliding-window view: [N, C, OH, OW, KH, KW]."""
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    win = sliding_window_view(xp, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    y = np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))
    return y if b is None else y + b.astype(np.float64)[None, :, None, None]


def _p(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.3


def _passes(outputs, inputs, target=None):
    """The graph passes; without a target, the rewrite rules up to phase 0 only (the
    folds and the horizontal rules: the conv2d still a conv2d), as on the evaluator."""
    graph = hf.trace(list(outputs), inputs=list(inputs))
    if target is not None:
        return run_graph_passes(graph, GraphPassContext(target=target), list(GRAPH_PASSES))
    early = [r for r in registered_rules() if r.phase <= 0 and (r.targets is None or "evaluator" in r.targets)]
    return run_graph_passes(graph, GraphPassContext(target="evaluator", rewrite_rules=early), list(GRAPH_PASSES))


def _names(graph):
    return [op.name for op in graph.nodes]


@pytest.fixture
def hconv(monkeypatch):
    """The switch on (the default; an environment with HIDET_FRAMEWORK_HCONV=0 would skip the rule)."""
    monkeypatch.setenv(ENV, "1")


def _check(target, outs, inputs, reference, rng, fx, rtol=1e-4, atol=1e-4):
    """Rule on (fused and unfused) and off, fresh inputs each: all agree with float64."""
    fx.need_target(target)
    graph = hf.trace(list(outs), inputs=list(inputs))
    for rule_on, fusion in ((True, True), (True, False), (False, True)):
        with rules_off(*(() if rule_on else RULES)):
            fn = hf.compile(graph, target=target, fusion=fusion)
            arrays = [rng.standard_normal(t.shape).astype(t.dtype.numpy_name) for t in inputs]
            want = reference(*[a.astype(np.float64) for a in arrays])
            for got, w in zip(run_poisoned(fn, graph.outputs, arrays, target), want):
                np.testing.assert_allclose(got, w, rtol=rtol, atol=atol)


def _block(rng, widths=(5, 11, 3), biased=(True, False, True), act=True, dtype="float32"):
    """The opening of an Inception block in small: 1x1 convolutions of x (relu after
    each), one feeding a padded 3x3 conv, the rest and that concatenated with a pool."""
    x = hf.symbol((1, C, H, W), dtype)
    ws = [_p(rng, o, C, 1, 1).astype(dtype) for o in widths]
    bs = [_p(rng, o).astype(dtype) if b else None for o, b in zip(widths, biased)]
    w3 = _p(rng, 3, widths[1], 3, 3).astype(dtype)
    heads = []
    for w, b in zip(ws, bs):
        y = hf.ops.conv2d(x, hf.constant(w), None if b is None else hf.constant(b))
        heads.append(hf.ops.relu(y) if act else y)
    mid = hf.ops.relu(hf.ops.conv2d(heads[1], hf.constant(w3), padding=1))
    pool = hf.ops.max_pool2d(x, 3, stride=1, padding=1)
    out = hf.ops.concat([heads[0], mid, *heads[2:], pool], axis=1)

    def reference(xa):
        f = (lambda v: np.maximum(v, 0)) if act else (lambda v: v)
        hs = [f(_conv_np(xa, w, b)) for w, b in zip(ws, bs)]
        m = np.maximum(_conv_np(hs[1], w3, pad=1), 0)
        p = sliding_window_view(np.pad(xa, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf),
                                (3, 3), axis=(2, 3)).max(axis=(-2, -1))
        return [np.concatenate([hs[0], m, *hs[2:], p], axis=1)]

    return [out], [x], reference


def test_the_siblings_become_one_conv2d_with_the_relu_and_slices(rng):
    outs, inputs, _ = _block(rng)
    graph = _passes(outs, inputs)
    names = _names(graph)
    assert names.count("conv2d") == 2 and names.count("slice") == 3 and names.count("relu") == 2, names
    (wide,) = [op for op in graph.nodes if op.name == "conv2d" and op.outputs[0].shape[1] == 5 + 11 + 3]
    assert wide.inputs[1].is_constant() and tuple(wide.inputs[2].shape) == (19,)
    # the relu is on the wide output, the slices after it
    (relu,) = [op for op in graph.nodes if op.name == "relu" and op.inputs[0] is wide.outputs[0]]
    assert all(op.inputs[0] is relu.outputs[0] for op in graph.nodes if op.name == "slice")
    with rules_off(*RULES):
        assert _names(_passes(outs, inputs)).count("conv2d") == 4


@pytest.mark.parametrize("act", [True, False])
@pytest.mark.parametrize("target", TARGETS)
def test_the_merged_block_matches_float64(target, act, rng, fx, hconv):
    outs, inputs, reference = _block(rng, act=act)
    _check(target, outs, inputs, reference, rng, fx)


def test_a_batch_norm_folds_before_the_merge(rng):
    """The folds (phase -1) see each convolution before this rule (phase 0) makes it a
    slice: one conv2d and no batch_norm is left."""
    x = hf.symbol((1, C, H, W), "float32")
    outs = []
    for o in (3, 5):
        y = hf.ops.conv2d(x, hf.constant(_p(rng, o, C, 1, 1)))
        stats = [hf.constant(_p(rng, o)) for _ in range(3)] + [hf.constant(rng.uniform(0.5, 2, o).astype(np.float32))]
        outs.append(hf.ops.relu(hf.ops.batch_norm(y, *stats)))
    names = _names(_passes(outs, [x]))
    assert names.count("conv2d") == 1 and "batch_norm" not in names and names.count("relu") == 1, names


def _case(rng, case):
    """Three readers of x; returns (outputs, inputs, reference, conv2d count after the
    rule, whether slices appear)."""
    x = hf.symbol((1, C, H, W), "float32")
    w1, w2, w3 = _p(rng, 5, C, 1, 1), _p(rng, 3, C, 1, 1), _p(rng, 2, C, 1, 1)
    b1 = _p(rng, 5)
    inputs, conv = [x], hf.ops.conv2d
    y1 = hf.ops.relu(conv(x, hf.constant(w1), hf.constant(b1)))
    r1 = lambda xa: np.maximum(_conv_np(xa, w1, b1), 0)  # noqa: E731
    p2 = conv(x, hf.constant(w2))
    r2 = lambda xa: _conv_np(xa, w2)  # noqa: E731
    extra, rextra = [], []
    if case == "stride":                    # the second has stride 2: not a sibling
        p2 = conv(x, hf.constant(w2), stride=2)
        r2 = lambda xa: _conv_np(xa, w2, stride=2)  # noqa: E731
    elif case == "kernel":                  # a 3x3: not a sibling
        w2 = _p(rng, 3, C, 3, 3)
        p2 = conv(x, hf.constant(w2), padding=1)
        r2 = lambda xa: _conv_np(xa, w2, pad=1)  # noqa: E731
    elif case == "computed_weight":         # the weight is a graph input
        wi = hf.symbol((3, C, 1, 1), "float32")
        inputs.append(wi)
        p2 = conv(x, wi)
        r2 = lambda xa, wa: _conv_np(xa, wa)  # noqa: E731
    elif case == "groups":                  # grouped (C = 7 is prime: 7 groups of 1, O = 7)
        w2 = _p(rng, 7, 1, 1, 1)
        p2 = conv(x, hf.constant(w2), groups=7)
        r2 = lambda xa: xa * w2.reshape(1, 7, 1, 1).astype(np.float64)  # noqa: E731
    y2 = hf.ops.relu(p2)
    if case == "read_twice":                # the product read by the relu and an add
        y2 = hf.ops.add(y2, p2)
        r2_ = r2
        r2 = lambda xa: np.maximum(r2_(xa), 0) + r2_(xa)  # noqa: E731
    elif case == "returned":                # the product is a graph output too
        extra, rextra = [p2], [r2]
    elif case == "sigmoid":                 # another activation than the others': both stay
        y2 = hf.ops.sigmoid(p2)
        r2_ = r2
        r2 = lambda xa: 1 / (1 + np.exp(-r2_(xa)))  # noqa: E731
    y3 = hf.ops.relu(conv(x, hf.constant(w3)))
    r3 = lambda xa: np.maximum(_conv_np(xa, w3), 0)  # noqa: E731
    relu2 = case not in ("read_twice", "sigmoid")

    def reference(xa, *more):
        second = r2(xa, *more) if case == "computed_weight" else r2(xa)
        second = np.maximum(second, 0) if relu2 else second
        return [r1(xa), second, r3(xa), *[r(xa) for r in rextra]]

    merged = {"stride": 2, "kernel": 2, "computed_weight": 2, "groups": 2}.get(case, 1)
    return [y1, y2, y3, *extra], inputs, reference, merged


CASES = ["stride", "kernel", "computed_weight", "groups", "read_twice", "returned", "sigmoid"]


@pytest.mark.parametrize("case", CASES)
def test_what_must_not_merge_stays_apart_and_the_rest_is_right(case, rng, fx):
    outs, inputs, reference, merged = _case(rng, case)
    graph = _passes(outs, inputs)
    names = _names(graph)
    assert names.count("conv2d") == merged, names
    if merged == 1:  # all three merged; the relu stays per slice (not every member has it alone)
        assert names.count("slice") == 3 and names.count("relu") >= 2, names
    else:  # the first and third merged; the other conv kept its own
        assert names.count("slice") == 2 and names.count("relu") == 2, names
    _check("evaluator", outs, inputs, reference, rng, fx)


@pytest.mark.parametrize("case", ["kernel", "read_twice", "returned"])
def test_refusals_are_right_on_cpu(case, rng, fx, hconv):
    outs, inputs, reference, _ = _case(rng, case)
    _check("cpu", outs, inputs, reference, rng, fx)


def _bottleneck_opening(rng, m, wide, to_concat=0):
    """ResNet's first bottleneck opening on x: a 1x1 (m, relu) into a 3x3, a downsample
    1x1 (`wide`) into the residual add and relu, then a 1x1 reading that; with
    `to_concat`, a third 1x1 sibling (relu) whose output only meets the block's in a
    concat. (outputs, inputs, float64 reference)"""
    x = hf.symbol((1, C, H, W), "float32")
    w1, w2, wd, wt = _p(rng, m, C, 1, 1), _p(rng, wide, m, 3, 3), _p(rng, wide, C, 1, 1), _p(rng, m, wide, 1, 1)
    wc = _p(rng, to_concat, C, 1, 1)
    k = [hf.constant(a) for a in (w1, w2, wd, wt, wc)]
    t = hf.ops.relu(hf.ops.conv2d(hf.ops.relu(hf.ops.conv2d(x, k[0])), k[1], padding=1))
    r = hf.ops.relu(t + hf.ops.conv2d(x, k[2]))
    y = hf.ops.conv2d(r, k[3])
    outs = [hf.ops.concat([y, hf.ops.relu(hf.ops.conv2d(x, k[4]))], axis=1) if to_concat else y]

    def reference(xa):
        u = np.maximum(_conv_np(np.maximum(_conv_np(xa, w1), 0), w2, pad=1), 0)
        v = _conv_np(np.maximum(u + _conv_np(xa, wd), 0), wt)
        return [np.concatenate([v, np.maximum(_conv_np(xa, wc), 0)], axis=1) if to_concat else v]

    return outs, [x], reference


def test_on_the_cpu_members_of_blocked_chains_stay_apart(rng, fx, hconv):
    """Whole vectors of channels reaching another convolution (the blocked chain's
    members, rules_blocked_chain.would_chain) are not merged on the cpu: ResNet's
    opening keeps its two convolutions and no slice; with channel counts that are no
    whole vectors the same graph merges; a member that only meets the others in a
    concat merges with another such and leaves the chain's member alone."""
    fx.need_target("cpu")
    from hidet_plugin_ops.cpu_blocked import blocked_lanes
    from hidet_framework.extension import plugin_host

    lanes = blocked_lanes(plugin_host().backend_for("cpu").detect_target())
    cases = [((lanes, 4 * lanes, 0), 0), ((lanes + 3, 4 * lanes + 3, 0), 2), ((lanes, 4 * lanes, 2 * lanes), 0),
             ((lanes + 1, 4 * lanes, 2 * lanes), 2)]
    for (m, wide, to_concat), slices in cases:
        outs, inputs, reference = _bottleneck_opening(rng, m, wide, to_concat)
        names = _names(_passes(outs, inputs, "cpu"))
        assert names.count("slice") == slices, ((m, wide, to_concat), names)
        assert _names(_passes(outs, inputs, "evaluator")).count("slice") == 2 + (to_concat > 0)
        if slices:
            _check("cpu", outs, inputs, reference, rng, fx)
    # a depthwise reader is no chain member (only a conv2d of groups 1 is packed): these merge
    x = hf.symbol((1, C, H, W), "float32")
    heads = [hf.ops.relu(hf.ops.conv2d(x, hf.constant(_p(rng, lanes, C, 1, 1)))) for _ in range(2)]
    dw = hf.ops.conv2d(heads[0], hf.constant(_p(rng, lanes, 1, 3, 3)), padding=1, groups=lanes)
    assert _names(_passes([dw, heads[1]], [x], "cpu")).count("slice") == 2


def test_the_same_convs_in_two_graphs_get_each_graph_s_own_wide_conv(rng, fx):
    """The rule remembers the groups it built; the same convolutions traced into a
    second graph where their outputs have other readers (here: returned in the first,
    so no shared relu there) must not reuse the first graph's wide output."""
    fx.need_target("evaluator")
    x = hf.symbol((1, C, H, W), "float32")
    ws = [_p(rng, o, C, 1, 1) for o in (3, 5)]
    ps = [hf.ops.conv2d(x, hf.constant(w)) for w in ws]
    ys = [hf.ops.relu(p) for p in ps]
    hf.compile(hf.trace([*ys, ps[1]], inputs=[x]), target="evaluator")
    fn = hf.compile(hf.trace(ys, inputs=[x]), target="evaluator")
    xa = rng.standard_normal((1, C, H, W)).astype(np.float32)
    for got, w in zip(fn(xa), ws):
        np.testing.assert_allclose(got, np.maximum(_conv_np(xa.astype(np.float64), w), 0), rtol=1e-4, atol=1e-4)


def test_a_conv_on_another_input_or_alone_is_left_alone(rng):
    x, z = hf.symbol((1, C, H, W), "float32"), hf.symbol((1, C, H, W), "float32")
    w = hf.constant(_p(rng, 3, C, 1, 1))
    outs = [hf.ops.conv2d(x, w), hf.ops.conv2d(z, w), hf.ops.relu(x)]
    names = _names(_passes(outs, [x, z]))
    assert names.count("conv2d") == 2 and "slice" not in names


def test_the_switch_turns_it_off_everywhere(rng, monkeypatch):
    """Graph passes only (no GPU): on by default on cuda, the cpu and the evaluator;
    HIDET_FRAMEWORK_HCONV=0 turns it off on all three."""
    pytest.importorskip("hidet_plugin_cuda")
    outs, inputs, _ = _block(rng, dtype="float16")

    def anchors(target):
        return sum(n in ("conv2d", "conv2d_igemm", "conv2d_packed", "matmul") for n in
                   _names(_passes(outs, inputs, target)))

    cpu_outs, cpu_inputs, _ = _block(rng)

    def slices(target):
        return _names(_passes(cpu_outs, cpu_inputs, target)).count("slice")

    monkeypatch.delenv(ENV, raising=False)
    assert anchors("cuda") == 2 and slices("cpu") == 3 and slices("evaluator") == 3
    monkeypatch.setenv(ENV, "0")
    assert anchors("cuda") == 4 and slices("cpu") == 0 and slices("evaluator") == 0


@pytest.mark.cuda
def test_the_block_on_cuda_in_fp16_matches_float64_with_fewer_launches(rng, hconv):
    outs, inputs, reference = _block(rng, widths=(16, 24, 8), dtype="float16")
    graph = hf.trace(outs, inputs=inputs)
    on = hf.compile(graph, target="cuda")
    with rules_off(*RULES):
        off = hf.compile(graph, target="cuda")
    assert on.num_launches < off.num_launches, (on.num_launches, off.num_launches)
    for fn in (on, off):
        xa = rng.standard_normal(inputs[0].shape).astype(np.float16)
        got = np.asarray(fn(xa), np.float64)
        np.testing.assert_allclose(got, reference(xa.astype(np.float64))[0], rtol=2e-2, atol=2e-2)


@st.composite
def _siblings(draw):
    """2..4 convolutions of one input with drawn widths, windows from a small pool (so
    some share one and some do not), bias or not, and a follower each: relu, nothing,
    relu and a second reader, or the product returned as well."""
    k = draw(st.integers(2, 4))
    convs = draw(st.lists(st.tuples(st.integers(1, 5), st.sampled_from([(1, 1, 0), (1, 2, 0), (3, 1, 1)]),
                                    st.booleans(), st.sampled_from(["relu", "none", "twice", "returned"])),
                          min_size=k, max_size=k))
    return convs, draw(st.integers(3, 6)), draw(st.integers(0, 2 ** 31 - 1))


@given(_siblings())
@settings(max_examples=15, deadline=None)
def test_property_every_drawn_group_matches_float64_on_the_evaluator(case):
    convs, size, seed = case
    rng = np.random.default_rng(seed)
    x = hf.symbol((1, 3, size, size), "float32")
    outs, refs = [], []
    for o, (kk, stride, pad), biased, follow in convs:
        w, b = _p(rng, o, 3, kk, kk), (_p(rng, o) if biased else None)
        p = hf.ops.conv2d(x, hf.constant(w), None if b is None else hf.constant(b), stride=stride, padding=pad)
        ref = (lambda w, b, s, q: lambda xa: _conv_np(xa, w, b, s, q))(w, b, stride, pad)
        if follow == "none":
            outs.append(p)
            refs.append(ref)
            continue
        outs.append(hf.ops.relu(p) if follow != "twice" else hf.ops.add(hf.ops.relu(p), p))
        refs.append((lambda r, f: lambda xa: np.maximum(r(xa), 0) + (r(xa) if f == "twice" else 0))(ref, follow))
        if follow == "returned":
            outs.append(p)
            refs.append(ref)
    fn = hf.compile(hf.trace(outs, inputs=[x]), target="evaluator")
    xa = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    got = fn(xa)
    got = [got] if len(outs) == 1 else list(got)
    for g, r in zip(got, refs):
        np.testing.assert_allclose(g, r(xa.astype(np.float64)), rtol=1e-4, atol=1e-4)
