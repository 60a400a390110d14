"""max_pool2d in the channel-blocked layout (cpu_max_pool_blocked.py) and the chain rule
that makes it (rules_blocked_chain.chain_pool).

The kernel: every candidate against the float64 reference of test_cpu_max_pool.py (the
same windows: odd and prime sizes, strides, dilation, uneven pads, ceil mode, windows
with no tap inside the image) on this machine's lanes and on AVX2's 8 (gcc told
-mno-avx512f), outputs poisoned with NaN; a NaN tap is the window's maximum, in the one-pass rows too.
The rule: a ResNet-like stem (7x7/2 conv, relu, 3x3/2 max pool) before a bottleneck
with a downsample runs blocked from the stem's store to the block's end (no conversion
kernel, the pool on blocked tensors), against float64 with NaN-poisoned ``out=``;
refused where the stem's channels are not whole vectors, where nothing after the pool
is a convolution, and with the rule switched off."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import rules_off
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_ops.cpu_blocked import blocked_lanes
from hidet_plugin_ops.cpu_max_pool_blocked import CpuMaxPool2dBlocked, max_pool2d_blocked

from .cpu_candidates import ISAS, block, check_candidates, isa_target
from .test_cpu_conv import conv64
from .test_cpu_max_pool import CASES, max_pool64


def _blocked_pool(xb_shape, kernel, stride, pads, dilation, ceil_mode):
    """The blocked operator with the window pooling.max_pool2d gives the same NCHW input."""
    n, cb, h, w, lanes = xb_shape
    ref = hf.ops.max_pool2d(hf.symbol((n, cb * lanes, h, w), "float32"), kernel, stride, pads, dilation,
                            ceil_mode=ceil_mode)
    a = ref.producer.attributes
    xb = hf.symbol(xb_shape, "float32")
    return max_pool2d_blocked(xb, a["kernel"], a["stride"], a["dilation"], a["pads"], tuple(ref.shape[2:]))


def _compile(cpu_backend, y, params, target):
    task, attributes = y.producer.task, dict(y.producer.attributes)
    template = CpuMaxPool2dBlocked()
    assert template.applies(task, attributes)
    return compile_scheduled(task, template.build(task, attributes, params, target), cpu_backend, target)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_candidates_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, kernel, stride, pads, dilation, ceil_mode = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    lanes = blocked_lanes(target)
    n, _, h, w = x_shape
    x = rng.standard_normal((n, 2 * lanes, h, w)).astype(np.float32)     # two channel blocks
    ref = block(max_pool64(x, kernel, stride, pads, dilation, ceil_mode), lanes).astype(np.float32)
    y = _blocked_pool((n, 2, h, w, lanes), kernel, stride, pads, dilation, ceil_mode)
    assert tuple(y.shape) == ref.shape
    task, attributes = y.producer.task, dict(y.producer.attributes)
    template = CpuMaxPool2dBlocked()
    assert template.applies(task, attributes)
    space = template.space(target, 1)
    assert len(space) == 2
    check_candidates(cpu_backend, template, task, attributes, space, target, [block(x, lanes)], ref.shape,
                     lambda out, params: np.testing.assert_array_equal(out, ref, err_msg=f"{case} {isa} {params}"))


@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 1, 1, 1)])
def test_a_nan_in_a_window_is_its_maximum(cpu_backend, pads):
    """NaN taps (numpy's maximum keeps them, session 14) first in their window (the
    one-pass rows start from the first tap), inside and on the border, and a window all
    NaN; the windows without a NaN are unchanged."""
    target = cpu_backend.detect_target()
    lanes = blocked_lanes(target)
    x = np.arange(lanes * 11 * 9, dtype=np.float32).reshape(1, lanes, 11, 9) % 23
    x[0, 0, 0, :] = np.nan                  # the first kernel row of the first windows
    x[0, 1, 4, 4] = np.nan
    x[0, 2, 0:3, 0:3] = np.nan              # a whole window (pads 0)
    x[0, lanes - 1, :, 0] = np.nan          # the first column of every row
    y = _blocked_pool((1, 1, 11, 9, lanes), (3, 3), (2, 2), pads, (1, 1), False)
    out = np.zeros(tuple(y.shape), np.float32)
    _compile(cpu_backend, y, {"rows": 0}, target).run([block(x, lanes)], [out])
    ref = block(max_pool64(x, (3, 3), (2, 2), pads, (1, 1), False), lanes)
    np.testing.assert_array_equal(out, ref.astype(np.float32))
    assert np.isnan(out[0, 0, 0, :, 0]).all() and np.isnan(out[0, 0, :, 0, lanes - 1]).all()
    assert not np.isnan(out[0, 0, 1:, :, 3]).any()


def _stem_net(rng, c, size, tail_conv=True):
    """7x7/2 stem (3 -> c) → relu → 3x3/2 max pool (pad 1) → a bottleneck whose
    downsample widens c → 2c (→ a 1x1 when `tail_conv`); the graph, its input and the
    float64 reference."""
    def r(*shape):
        return (0.5 * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    ws, bs = r(c, 3, 7, 7), r(c)
    w1, b1, w2, b2, w3, b3, wd, bd, wt = r(c, c, 1, 1), r(c), r(c, c, 3, 3), r(c), r(2 * c, c, 1, 1), r(2 * c), \
        r(2 * c, c, 1, 1), r(2 * c), r(c, 2 * c, 1, 1)
    k = {name: hf.constant(v) for name, v in dict(ws=ws, bs=bs, w1=w1, b1=b1, w2=w2, b2=b2, w3=w3, b3=b3, wd=wd,
                                                   bd=bd, wt=wt).items()}
    x = hf.symbol((1, 3) + size, "float32")
    p = hf.ops.max_pool2d(hf.ops.relu(hf.ops.conv2d(x, k["ws"], k["bs"], stride=2, padding=3)), 3, 2, 1)
    if not tail_conv:
        return x, p, lambda a: max_pool64(np.maximum(conv64(a, ws, bs, (2, 2), (3,) * 4, (1, 1)), 0), (3, 3),
                                          (2, 2), (1,) * 4, (1, 1), False)
    t = hf.ops.relu(hf.ops.conv2d(p, k["w1"], k["b1"]))
    t = hf.ops.relu(hf.ops.conv2d(t, k["w2"], k["b2"], padding=1))
    t = hf.ops.relu(hf.ops.conv2d(t, k["w3"], k["b3"]) + hf.ops.conv2d(p, k["wd"], k["bd"]))
    y = hf.ops.conv2d(t, k["wt"])

    def ref(a):
        s = np.maximum(conv64(a, ws, bs, (2, 2), (3,) * 4, (1, 1)), 0)
        q = max_pool64(s, (3, 3), (2, 2), (1,) * 4, (1, 1), False)
        u = np.maximum(conv64(q, w1, b1, (1, 1), (0,) * 4, (1, 1)), 0)
        u = np.maximum(conv64(u, w2, b2, (1, 1), (1,) * 4, (1, 1)), 0)
        u = np.maximum(conv64(u, w3, b3, (1, 1), (0,) * 4, (1, 1)) + conv64(q, wd, bd, (1, 1), (0,) * 4, (1, 1)), 0)
        return conv64(u, wt, None, (1, 1), (0,) * 4, (1, 1))

    return x, y, ref


def _names(graph):
    return [op.name for op in rewrite_patterns(graph, GraphPassContext(target="cpu")).nodes]


def _close(out, ref):
    err = np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < 2e-5, f"relative error {err:.3g}"


@pytest.mark.parametrize("size", [(37, 29), (23, 41)])
def test_the_stem_pool_and_block_run_blocked(rng, cpu_backend, size):
    c = blocked_lanes(cpu_backend.detect_target()) * 2
    x, y, ref = _stem_net(rng, c, size)
    graph = hf.trace(y, [x])
    rewritten = rewrite_patterns(graph, GraphPassContext(target="cpu"))
    names = [op.name for op in rewritten.nodes]
    assert names.count("max_pool2d_blocked") == 1 and "max_pool2d" not in names, names
    assert "from_blocked" not in names and "to_blocked" not in names, names
    convs = [(op.inputs[0].rank, op.outputs[0].rank) for op in rewritten.nodes if op.name == "conv2d_packed"]
    assert convs[0] == (4, 5) and all(r == (5, 5) for r in convs[1:-1]) and convs[-1] == (5, 4), convs
    fn = hf.compile(graph, target="cpu", space=0)
    assert "ops.max_pool2d_blocked_cpu" in [t.scheduled.source for t in fn.tasks]
    with rules_off("cpu_chain_pool"):
        apart = hf.compile(graph, target="cpu", space=0)
    assert "ops.max_pool2d_blocked_cpu" not in [t.scheduled.source for t in apart.tasks]
    a = rng.standard_normal((1, 3) + size).astype(np.float32)
    expect = ref(a.astype(np.float64))
    for f in (fn, apart):
        out = np.full(expect.shape, np.nan, np.float32)
        f(a, out=out)
        _close(out, expect)


def test_refused_where_channels_are_not_whole_vectors_or_no_conv_follows(rng, cpu_backend):
    lanes = blocked_lanes(cpu_backend.detect_target())
    x, y, _ = _stem_net(rng, lanes + lanes // 2, (19, 17))          # 1.5 vectors of channels
    assert "max_pool2d_blocked" not in _names(hf.trace(y, [x]))
    x, y, ref = _stem_net(rng, 2 * lanes, (19, 17), tail_conv=False)  # the pool's output is returned
    graph = hf.trace(y, [x])
    names = _names(graph)
    assert "max_pool2d_blocked" not in names and "from_blocked" not in names, names
    a = rng.standard_normal((1, 3, 19, 17)).astype(np.float32)
    out = np.full(tuple(y.shape), np.nan, np.float32)
    hf.compile(graph, target="cpu", space=0)(a, out=out)
    _close(out, ref(a.astype(np.float64)))


@pytest.mark.parametrize("channels", [32, 24])
def test_the_rule_takes_whole_blocks_only(channels):
    """``max_pool2d(from_blocked(t, C))`` runs blocked when C fills t's lanes; with lanes
    past C (24 of 32) it stays NCHW: the blocked pool would hand the next reader lanes
    that from_blocked drops."""
    xb = hf.symbol((1, 2, 9, 11, 16), "float32")
    from hidet_plugin_ops.cpu_blocked import from_blocked

    graph = hf.trace(hf.ops.max_pool2d(from_blocked(xb, channels), 3, 2, 1), [xb])
    names = _names(graph)
    assert ("max_pool2d_blocked" in names) == (channels == 32), names
    assert ("max_pool2d" in names) == (channels == 24), names


def test_shape_checks():
    xb = hf.symbol((1, 2, 9, 9, 16), "float32")
    with pytest.raises(hf.graph.ShapeError):
        max_pool2d_blocked(hf.symbol((1, 32, 9, 9), "float32"), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (5, 5))
    for out in ((6, 5), (4, 5)):                # neither the floor nor the ceil extent
        with pytest.raises(hf.graph.ShapeError):
            max_pool2d_blocked(xb, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), out)
    assert tuple(max_pool2d_blocked(xb, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (5, 5)).shape) == (1, 2, 5, 5, 16)
