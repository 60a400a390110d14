"""In-place residual epilogues on the CPU (fusion/inplace.py, runtime/memory_plan.py):
a convolution whose epilogue adds a residual that dies there writes its output into
the residual's buffer. Checked: ResNet-like blocks (blocked chain and NCHW, odd and
prime image sizes, channels that are not whole vectors) take it and give the float64
reference's values in NaN-poisoned ``out=`` arrays, through the direct call, the
copying path and with in-place planning switched off; the graph refuses a residual
that is a graph input, a constant, read again later, or of another shape; the
caller's arrays are never written."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf

from .test_cpu_conv import conv64


def _w(rng, o, c, k):
    return (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32), \
        (0.1 * rng.standard_normal(o)).astype(np.float32)


def _conv(t, wb, **kw):
    return hf.ops.conv2d(t, hf.constant(wb[0]), hf.constant(wb[1]), **kw)


def _ref(a, wb, pad=0):
    return conv64(a, wb[0], wb[1], (1, 1), (pad,) * 4, (1, 1))


def _close(out, ref):
    err = np.abs(out.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < 2e-5, f"relative error {err:.3g}"


def _check(graph, inputs, ref, expect_in_place, monkeypatch):
    fn = hf.compile(graph, target="cpu", space=0)
    assert len(fn.in_place) == expect_in_place, fn.in_place
    for _, inp, out in fn.in_place:  # the heir's bytes are the residual's
        slots = {t.name: fn._slot[t.uid] for op in fn.graph.nodes for t in op.outputs}
        assert fn.plan.offsets[slots[out]] == fn.plan.offsets[slots[inp]]
    assert fn.plan.overlapping_pairs() == []
    saved = [a.copy() for a in inputs]
    outs = [np.full(r.shape, np.nan, np.float32) for r in ref]
    for _ in range(2):  # twice: a second call must not see what the first left in place
        fn(*inputs, out=outs if len(outs) > 1 else outs[0])
        for o, r in zip(outs, ref):
            _close(o, r)
    strided = [np.asfortranarray(a) for a in inputs]  # not C-contiguous: the copying path
    res = fn(*strided)
    for o, r in zip(res if isinstance(res, tuple) else (res,), ref):
        _close(o, r)
    for a, s in zip(inputs, saved):
        np.testing.assert_array_equal(a, s)  # the caller's arrays are never written
    monkeypatch.setenv("HIDET_FRAMEWORK_INPLACE", "0")
    off = hf.compile(graph, target="cpu", space=0)
    assert off.in_place == []
    res = off(*inputs)
    for o, r in zip(res if isinstance(res, tuple) else (res,), ref):
        _close(o, r)
    monkeypatch.delenv("HIDET_FRAMEWORK_INPLACE")
    return fn


@pytest.mark.parametrize("c, m, size", [(32, 16, (13, 11)), (48, 16, (7, 17)), (24, 12, (13, 11)), (24, 12, (11, 5))])
def test_bottlenecks_write_their_residual_in_place(rng, monkeypatch, c, m, size):
    """stem 3x3 -> relu -> two bottlenecks (1x1, 3x3, 1x1 + identity + relu): the second
    bottleneck's expansion takes the first one's output (it dies there); the first one's
    takes the stem's. Blocked chains for 32 and 48 channels, NCHW for 24."""
    ws = _w(rng, c, 3, 3)
    blocks = [(_w(rng, m, c, 1), _w(rng, m, m, 3), _w(rng, c, m, 1)) for _ in range(2)]
    x = hf.symbol((1, 3) + size, "float32")
    t = hf.ops.relu(_conv(x, ws, padding=1))
    for b in blocks:
        u = hf.ops.relu(_conv(hf.ops.relu(_conv(hf.ops.relu(_conv(t, b[0])), b[1], padding=1)), b[2]) + t)
        t = u
    a = rng.standard_normal((1, 3) + size).astype(np.float32)
    r = np.maximum(_ref(a, ws, 1), 0)
    for b in blocks:
        r = np.maximum(_ref(np.maximum(_ref(np.maximum(_ref(r, b[0]), 0), b[1], 1), 0), b[2]) + r, 0)
    _check(hf.trace(t, [x]), [a], [r], 2, monkeypatch)


def _expansion(rng, c, m, size):
    """t = relu(1x1 c->c of x), h = relu(1x1 c->m of t): a bottleneck's opening; the
    tests add an expansion m->c of h and a residual to it."""
    w1, w2, w3 = _w(rng, m, c, 1), _w(rng, c, m, 1), _w(rng, c, c, 1)
    x = hf.symbol((1, c) + size, "float32")
    t = hf.ops.relu(_conv(x, w3))
    h = hf.ops.relu(_conv(t, w1))
    a = rng.standard_normal((1, c) + size).astype(np.float32)
    t64 = np.maximum(_ref(a, w3), 0)
    return (w1, w2, w3), x, t, h, a, t64, np.maximum(_ref(t64, w1), 0)


C, M, SIZE = 32, 16, (9, 7)


def test_the_residual_dying_at_the_add_is_taken_and_the_result_feeds_on(rng, monkeypatch):
    (w1, w2, _), x, t, h, a, t64, h64 = _expansion(rng, C, M, SIZE)
    y = _conv(hf.ops.relu(_conv(h, w2) + t), w1)
    ref = _ref(np.maximum(_ref(h64, w2) + t64, 0), w1)
    _check(hf.trace(y, [x]), [a], [ref], 1, monkeypatch)


def test_a_residual_read_again_later_is_taken_only_where_it_dies(rng, monkeypatch):
    """t is added after two expansions: the first add must leave it alone (t is read
    later), the second may take it."""
    (w1, w2, _), x, t, h, a, t64, h64 = _expansion(rng, C, M, SIZE)
    w5 = _w(rng, C, C, 1)
    y = hf.ops.relu(_conv(h, w2) + t)
    z = _conv(y, w5) + t
    y64 = np.maximum(_ref(h64, w2) + t64, 0)
    fn = _check(hf.trace(z, [x]), [a], [_ref(y64, w5) + t64], 1, monkeypatch)
    assert fn.in_place[0][2] == fn.graph.outputs[0].name  # the second add's output, not the first's


def test_a_residual_that_is_a_graph_input_is_never_taken(rng, monkeypatch):
    (w1, w2, _), x, t, h, a, t64, h64 = _expansion(rng, C, M, SIZE)
    s = hf.symbol((1, C) + SIZE, "float32")
    y = _conv(hf.ops.relu(_conv(h, w2) + s), w1)  # s read only at the epilogue's index
    sa = rng.standard_normal((1, C) + SIZE).astype(np.float32)
    ref = _ref(np.maximum(_ref(h64, w2) + sa, 0), w1)
    _check(hf.trace(y, [x, s]), [a, sa], [ref], 0, monkeypatch)


def test_a_residual_that_is_returned_is_never_taken(rng, monkeypatch):
    (w1, w2, _), x, t, h, a, t64, h64 = _expansion(rng, C, M, SIZE)
    y = hf.ops.relu(_conv(h, w2) + t)
    _check(hf.trace([y, t], [x]), [a], [np.maximum(_ref(h64, w2) + t64, 0), t64], 0, monkeypatch)


def test_a_constant_residual_is_never_taken(rng, monkeypatch):
    (w1, w2, _), x, t, h, a, t64, h64 = _expansion(rng, C, M, SIZE)
    k = rng.standard_normal((1, C) + SIZE).astype(np.float32)
    y = _conv(hf.ops.relu(_conv(h, w2) + hf.constant(k)), w1)
    ref = _ref(np.maximum(_ref(h64, w2) + k, 0), w1)
    _check(hf.trace(y, [x]), [a], [ref], 0, monkeypatch)


def test_a_broadcast_residual_is_never_taken(rng, monkeypatch):
    """r of shape (1, C, 1, 1), an intermediate dying at the add: read at another index
    (every pixel reads one element), so the proof refuses it."""
    (w1, w2, _), x, t, h, a, t64, h64 = _expansion(rng, C, M, SIZE)
    g = hf.symbol((1, C, 1, 1), "float32")
    r = hf.ops.relu(g * 2.0)
    y = _conv(hf.ops.relu(_conv(h, w2) + r), w1)
    ga = rng.standard_normal((1, C, 1, 1)).astype(np.float32)
    ref = _ref(np.maximum(_ref(h64, w2) + np.maximum(2.0 * ga.astype(np.float64), 0), 0), w1)
    _check(hf.trace(y, [x, g]), [a, ga], [ref], 0, monkeypatch)
