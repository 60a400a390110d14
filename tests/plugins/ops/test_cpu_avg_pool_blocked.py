"""avg_pool2d in the channel-blocked layout (cpu_avg_pool_blocked.py) and the chain rules
that keep an Inception-like block blocked (rules_blocked_chain.chain_avg_pool,
chain_concat, and rule 1 looking through concats and average pools).

The kernel: every candidate against the float64 reference of test_cpu_avg_pool.py (the
same windows: odd and prime sizes, strides, uneven pads, ceil mode, both divisors,
rows and columns with no tap inside) on this machine's lanes and on AVX2's 8 (gcc
told -mno-avx512f), outputs poisoned with NaN; refused where a window counts no
position and where an item's row would not fit its stack buffer.
The rules: a small Inception block (a stem conv, four branches: 1x1; 1x1 → 3x3; 3x3/1
average pool (the divisor counting the image only) → 1x1; 3x3/2 max pool beside a 3x3/2 conv after the concat) runs blocked
from the stem's store to the last convolution (no conversion, no NCHW concat or pool),
against float64 with NaN-poisoned ``out=``, and with the rules switched off; refused
where a concat input's channels are not whole vectors, where a concat input is not
blocked (a graph input), and where a blocked tensor's lanes run past its channels."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import rules_off
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns
from hidet_plugin_ops.cpu_avg_pool_blocked import CpuAvgPool2dBlocked, avg_pool2d_blocked
from hidet_plugin_ops.cpu_blocked import blocked_lanes, from_blocked

from .cpu_candidates import ISAS, block, check_candidates, isa_target
from .test_cpu_avg_pool import CASES, avg_pool64
from .test_cpu_conv import conv64
from .test_cpu_max_pool import max_pool64


def _blocked_pool(xb_shape, kernel, stride, pads, ceil_mode, include_pad):
    """The blocked operator with the window pooling.avg_pool2d gives the same NCHW input."""
    n, cb, h, w, lanes = xb_shape
    ref = hf.ops.avg_pool2d(hf.symbol((n, cb * lanes, h, w), "float32"), kernel, stride, pads,
                            ceil_mode=ceil_mode, count_include_pad=include_pad)
    a = ref.producer.attributes
    return avg_pool2d_blocked(hf.symbol(xb_shape, "float32"), a["kernel"], a["stride"], a["pads"],
                              tuple(ref.shape[2:]), include_pad, ceil_mode)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_candidates_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, kernel, stride, pads, ceil_mode, include_pad = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    lanes = blocked_lanes(target)
    n, _, h, w = x_shape
    x = rng.standard_normal((n, 2 * lanes, h, w)).astype(np.float32)     # two channel blocks
    ref = block(avg_pool64(x, kernel, stride, pads, ceil_mode, include_pad), lanes)
    y = _blocked_pool((n, 2, h, w, lanes), kernel, stride, pads, ceil_mode, include_pad)
    assert tuple(y.shape) == ref.shape
    task, attributes = y.producer.task, dict(y.producer.attributes)
    template = CpuAvgPool2dBlocked()
    assert template.applies(task, attributes)
    space = template.space(target, 1)
    assert len(space) == 2
    check_candidates(cpu_backend, template, task, attributes, space, target, [block(x, lanes)], ref.shape,
                     lambda out, params: np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6,
                                                                    err_msg=f"{case} {isa} {params}"))


def test_refuses_windows_that_count_no_position_and_rows_past_the_buffer():
    empty = _blocked_pool((1, 1, 5, 7, 16), (2, 2), (1, 1), (2, 2, 2, 2), False, False)   # corners: 0 / 0
    padded = _blocked_pool((1, 1, 5, 7, 16), (2, 2), (1, 1), (2, 2, 2, 2), False, True)
    wide = _blocked_pool((1, 1, 3, 1100, 16), (3, 3), (1, 1), (1, 1, 1, 1), False, True)  # 1102 * 16 floats
    narrow = _blocked_pool((1, 1, 3, 1000, 16), (3, 3), (1, 1), (1, 1, 1, 1), False, True)
    verdicts = [CpuAvgPool2dBlocked().applies(y.producer.task, dict(y.producer.attributes))
                for y in (empty, padded, wide, narrow)]
    assert verdicts == [False, True, False, True]


def test_shape_checks():
    xb = hf.symbol((1, 2, 9, 9, 16), "float32")
    with pytest.raises(hf.graph.ShapeError):
        avg_pool2d_blocked(hf.symbol((1, 32, 9, 9), "float32"), (3, 3), (2, 2), (1, 1, 1, 1), (5, 5), True)
    even = hf.symbol((1, 2, 10, 10, 16), "float32")    # 3x3/2 pad 1: floor 5, ceil 6
    for x, out, ceil_mode in ((xb, (6, 5), False), (xb, (4, 5), False), (even, (5, 5), True), (even, (6, 6), False)):
        with pytest.raises(hf.graph.ShapeError):
            avg_pool2d_blocked(x, (3, 3), (2, 2), (1, 1, 1, 1), out, True, ceil_mode)
    assert tuple(avg_pool2d_blocked(xb, (3, 3), (2, 2), (1, 1, 1, 1), (5, 5), True).shape) == (1, 2, 5, 5, 16)
    assert tuple(avg_pool2d_blocked(even, (3, 3), (2, 2), (1, 1, 1, 1), (6, 6), True, True).shape) == (1, 2, 6, 6, 16)


def _weights(rng, *shape):
    return (0.5 * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _inception_net(rng, lanes, size, odd=0, side_input=False):
    """stem 3x3 (3 -> 2L) → relu → concat[1x1 → L; 1x1 → L → 3x3 → 2L + `odd`;
    avg 3x3/1/1 (count_include_pad off) → 1x1 → L] → concat[3x3/2 conv → L; 3x3/2 max pool] → 1x1 → L. With
    `side_input` the first concat also takes a graph input of L channels. The graph's
    inputs, its output and the float64 reference."""
    c = 2 * lanes
    names = ("ws", "w1", "w2a", "w2b", "w3", "w4", "wt")
    shapes = ((c, 3, 3, 3), (lanes, c, 1, 1), (lanes, c, 1, 1), (c + odd, lanes, 3, 3), (lanes, c, 1, 1))
    cat = lanes + c + odd + lanes + (lanes if side_input else 0)
    shapes += ((lanes, cat, 3, 3), (lanes, lanes + cat, 1, 1))
    w = {k: _weights(rng, *s) for k, s in zip(names, shapes)}
    b = {k: _weights(rng, s[0]) for k, s in zip(names, shapes)}
    k = {n: (hf.constant(w[n]), hf.constant(b[n])) for n in names}
    x = hf.symbol((1, 3) + size, "float32")
    extra = hf.symbol((1, lanes) + size, "float32") if side_input else None

    def conv(t, n, stride=1, padding=0):
        return hf.ops.relu(hf.ops.conv2d(t, *k[n], stride=stride, padding=padding))

    s = conv(x, "ws", padding=1)
    pool = hf.ops.avg_pool2d(s, 3, 1, 1, count_include_pad=False)
    parts = [conv(s, "w1"), conv(conv(s, "w2a"), "w2b", padding=1), conv(pool, "w3")]
    m = hf.ops.concat(parts + ([extra] if side_input else []), axis=1)
    r = hf.ops.concat([conv(m, "w4", stride=2), hf.ops.max_pool2d(m, 3, 2)], axis=1)
    y = conv(r, "wt")

    def ref(a, e):
        def c64(t, n, stride=1, padding=0):
            return np.maximum(conv64(t, w[n], b[n], (stride,) * 2, (padding,) * 4, (1, 1)), 0)

        s = c64(a, "ws", padding=1)
        parts = [c64(s, "w1"), c64(c64(s, "w2a"), "w2b", padding=1),
                 c64(avg_pool64(s, (3, 3), (1, 1), (1,) * 4, False, False), "w3")]
        m = np.concatenate(parts + ([e] if side_input else []), axis=1)
        r = np.concatenate([c64(m, "w4", stride=2), max_pool64(m, (3, 3), (2, 2), (0,) * 4, (1, 1), False)], axis=1)
        return c64(r, "wt")

    return [x] + ([extra] if side_input else []), y, ref


def _run(fn, rng, inputs, ref):
    arrays = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in inputs]
    expect = ref(*[a.astype(np.float64) for a in arrays], *([None] if len(arrays) == 1 else []))
    out = np.full(expect.shape, np.nan, np.float32)
    fn(*arrays, out=out)
    err = np.abs(out - expect).max() / max(np.abs(expect).max(), 1e-30)
    assert err < 2e-5, f"relative error {err:.3g}"


def _rewritten(graph):
    return list(rewrite_patterns(graph, GraphPassContext(target="cpu")).nodes)


@pytest.mark.parametrize("size", [(17, 13), (11, 19)])
def test_an_inception_block_runs_blocked_from_end_to_end(rng, cpu_backend, size):
    lanes = blocked_lanes(cpu_backend.detect_target())
    inputs, y, ref = _inception_net(rng, lanes, size)
    graph = hf.trace(y, inputs)
    nodes = _rewritten(graph)
    names = [op.name for op in nodes]
    assert "from_blocked" not in names and "to_blocked" not in names, names
    assert names.count("avg_pool2d_blocked") == 1 and names.count("max_pool2d_blocked") == 1, names
    assert "avg_pool2d" not in names and "max_pool2d" not in names, names
    concats = [op for op in nodes if op.name == "concat"]
    assert len(concats) == 2 and all(op.outputs[0].rank == 5 for op in concats), names
    convs = [(op.inputs[0].rank, op.outputs[0].rank) for op in nodes if op.name == "conv2d_packed"]
    assert convs[0] == (4, 5) and all(r == (5, 5) for r in convs[1:-1]) and convs[-1] == (5, 4), convs
    fn = hf.compile(graph, target="cpu", space=0)
    assert "ops.avg_pool2d_blocked_cpu" in [getattr(t.scheduled, "source", "") for t in fn.tasks]
    with rules_off("cpu_chain_concat", "cpu_chain_avg_pool"):
        apart = hf.compile(graph, target="cpu", space=0)
        assert "avg_pool2d_blocked" not in [op.name for op in _rewritten(graph)]
    for f in (fn, apart):
        _run(f, rng, inputs, ref)


def test_refused_where_a_concat_input_is_not_whole_vectors_or_not_blocked(rng, cpu_backend):
    lanes = blocked_lanes(cpu_backend.detect_target())
    for odd, side_input in ((lanes // 2, False), (0, True)):
        inputs, y, ref = _inception_net(rng, lanes, (9, 11), odd=odd, side_input=side_input)
        graph = hf.trace(y, inputs)
        nodes = _rewritten(graph)
        first = [op for op in nodes if op.name == "concat"][0]
        assert first.outputs[0].rank == 4, (odd, side_input)     # the first concat stays NCHW
        if odd:     # and its producers too: a concat that cannot join blocks is not looked through
            assert "from_blocked" not in [op.name for op in nodes], [op.name for op in nodes]
        _run(hf.compile(graph, target="cpu", space=0), rng, inputs, ref)


@pytest.mark.parametrize("channels", [32, 24])
def test_the_rules_take_whole_blocks_only(channels):
    """``concat(from_blocked(t, C), ...)`` and ``avg_pool2d(from_blocked(t, C))`` run
    blocked when C fills t's lanes; with lanes past C (24 of 32) they stay NCHW."""
    a, b = hf.symbol((1, 2, 9, 11, 16), "float32"), hf.symbol((1, 1, 9, 11, 16), "float32")
    cat = hf.ops.concat([from_blocked(a, channels), from_blocked(b, 16)], axis=1)
    pool = hf.ops.avg_pool2d(from_blocked(a, channels), 3, 1, 1)
    names = [op.name for op in _rewritten(hf.trace([cat, pool], [a, b]))]
    assert ("avg_pool2d_blocked" in names) == (channels == 32), names
    assert ("avg_pool2d" in names) == (channels == 24), names
    assert names.count("from_blocked") == (2 if channels == 32 else 3), names
