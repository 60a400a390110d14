"""The global mean of a channel-blocked tensor (cpu_mean_blocked.py) and the chain rule
that makes it (rules_blocked_chain.chain_mean, with rule 1 counting a global mean as a
reader of the blocked layout).

The kernel: against a float64 reference on odd and prime sizes, one and several images,
lanes past C (filled with huge values that must not reach an output), keepdims on and
off, on this machine's lanes and on AVX2's 8 (gcc told -mno-avx512f), outputs poisoned
with NaN. The rules: a ResNet-like tail (bottleneck with its residual add, relu, global
mean, reshape) and a MobileNet-like one (1x1 → clip → global mean) run blocked up to the
mean with no conversion kernel, against float64 with NaN-poisoned ``out=``, and with the
rule off. Refused: a mean over other axes (its producer stays NCHW), a mean of a tensor
that is not blocked (a graph input)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import rules_off
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_ops.cpu_blocked import blocked_lanes
from hidet_plugin_ops.cpu_mean_blocked import CpuGlobalMeanBlocked, global_mean_blocked

from .cpu_candidates import ISAS, isa_target
from .test_cpu_conv import conv64

@pytest.fixture
def reduce_plugin():
    """The reduce plugin (reduce_mean) beside the installed ones, for the graph tests."""
    import hidet_plugin_reduce
    from hidet_framework.extension import plugin_host

    with plugin_host().temporary_plugin(hidet_plugin_reduce, "reduce"):
        yield


# (N, channel blocks, H, W, lanes short of full in the last block)
CASES = [(1, 2, 7, 7, 0), (2, 3, 5, 11, 5), (1, 1, 1, 1, 0), (3, 2, 13, 3, 1)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_kernel_against_float64(cpu_backend, rng, case, keepdims, isa, monkeypatch):
    n, cb, h, w, short = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    lanes = blocked_lanes(target)
    c = cb * lanes - short
    xb = rng.standard_normal((n, cb, h, w, lanes)).astype(np.float32)
    xb[:, -1, :, :, lanes - short:] = 3e38          # lanes past C: never read into an output
    ref = xb.astype(np.float64).mean(axis=(2, 3)).reshape(n, cb * lanes)[:, :c]
    ref = ref.reshape(n, c, 1, 1) if keepdims else ref
    y = global_mean_blocked(hf.symbol(xb.shape, "float32"), c, keepdims)
    assert tuple(y.shape) == ref.shape
    task, attributes = y.producer.task, dict(y.producer.attributes)
    template = CpuGlobalMeanBlocked()
    assert template.applies(task, attributes)
    for params in template.space(target, 1):
        compiled = compile_scheduled(task, template.build(task, attributes, params, target), cpu_backend, target)
        buf = np.full(ref.size + 64, np.nan, np.float32)     # a guard after the output: lanes past C stay out
        out = buf[:ref.size].reshape(ref.shape)
        compiled.run([xb], [out])
        assert not np.isnan(out).any(), f"{params}: an output element was never written"
        assert np.isnan(buf[ref.size:]).all(), f"{params}: a store past the output"
        np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6, err_msg=f"{case} {isa} {params}")


def test_shape_checks():
    with pytest.raises(hf.graph.ShapeError):
        global_mean_blocked(hf.symbol((1, 32, 7, 7), "float32"), 32, True)
    for channels in (16, 33, 0):      # 2 blocks of 16 hold 17..32 channels
        with pytest.raises(hf.graph.ShapeError):
            global_mean_blocked(hf.symbol((1, 2, 7, 7, 16), "float32"), channels, True)
    assert tuple(global_mean_blocked(hf.symbol((2, 2, 7, 7, 16), "float32"), 30, False).shape) == (2, 30)


def _w(rng, *shape):
    return (0.3 * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _tail(rng, lanes, size, kind):
    """stem 3x3 (3 → 2L) → relu, then `kind`: "resnet" a bottleneck (1x1 → relu → 3x3 →
    relu → 1x1 + the stem's output → relu) → global mean (keepdims) → reshape;
    "mobilenet" 1x1 → clip(0, 6) → global mean without keepdims; "pool" 1x1 + the stem's
    output → relu → ``global_avg_pool2d`` → reshape. The graph's input, its
    output and the float64 reference."""
    c, m = 2 * lanes, lanes
    ws, bs = _w(rng, c, 3, 3, 3), _w(rng, c)
    w = [_w(rng, m, c, 1, 1), _w(rng, m), _w(rng, m, m, 3, 3), _w(rng, m), _w(rng, c, m, 1, 1), _w(rng, c),
         _w(rng, c, c, 1, 1)]
    k = [hf.constant(a) for a in w]
    x = hf.symbol((1, 3) + size, "float32")
    s = hf.ops.relu(hf.ops.conv2d(x, hf.constant(ws), hf.constant(bs), padding=1))
    if kind == "resnet":
        t = hf.ops.relu(hf.ops.conv2d(s, k[0], k[1]))
        t = hf.ops.relu(hf.ops.conv2d(t, k[2], k[3], padding=1))
        t = hf.ops.relu(hf.ops.conv2d(t, k[4], k[5]) + s)
        y = hf.ops.reshape(hf.ops.reduce_mean(t, axes=(2, 3), keepdims=True), (1, c))
    elif kind == "mobilenet":
        t = hf.ops.clip(hf.ops.conv2d(s, k[6], k[5]), 0.0, 6.0)
        y = hf.ops.reduce_mean(t, axes=(2, 3), keepdims=False)
    else:       # the ops plugin's own global pool
        y = hf.ops.reshape(hf.ops.global_avg_pool2d(hf.ops.relu(hf.ops.conv2d(s, k[6], k[5]) + s)), (1, c))

    def ref(a):
        def c64(t, wi, bi, padding=0):
            return conv64(t, wi, bi, (1, 1), (padding,) * 4, (1, 1))

        s = np.maximum(c64(a, ws, bs, 1), 0)
        if kind == "resnet":
            t = np.maximum(c64(s, w[0], w[1]), 0)
            t = np.maximum(c64(t, w[2], w[3], 1), 0)
            t = np.maximum(c64(t, w[4], w[5]) + s, 0)
        elif kind == "mobilenet":
            t = np.clip(c64(s, w[6], w[5]), 0, 6)
        else:
            t = np.maximum(c64(s, w[6], w[5]) + s, 0)
        return t.mean(axis=(2, 3)).reshape(1, c)

    return x, y, ref


def _names(graph):
    return [op.name for op in rewrite_patterns(graph, GraphPassContext(target="cpu")).nodes]


def _close(fn, rng, size, ref):
    a = rng.standard_normal((1, 3) + size).astype(np.float32)
    expect = ref(a.astype(np.float64))
    out = np.full(expect.shape, np.nan, np.float32)
    fn(a, out=out)
    err = np.abs(out - expect).max() / max(np.abs(expect).max(), 1e-30)
    assert err < 2e-5, f"relative error {err:.3g}"


@pytest.mark.parametrize("kind,size", [("resnet", (7, 11)), ("mobilenet", (13, 5)), ("pool", (5, 3))])
def test_a_chain_ending_in_a_global_mean_stays_blocked(rng, cpu_backend, reduce_plugin, kind, size):
    lanes = blocked_lanes(cpu_backend.detect_target())
    x, y, ref = _tail(rng, lanes, size, kind)
    graph = hf.trace(y, [x])
    names = _names(graph)
    assert "from_blocked" not in names and "reduce_mean" not in names and "global_avg_pool2d" not in names, names
    assert names.count("global_mean_blocked") == 1, names
    fn = hf.compile(graph, target="cpu", space=0)
    assert "ops.global_mean_blocked_cpu" in [getattr(t.scheduled, "source", "") for t in fn.tasks]
    _close(fn, rng, size, ref)
    with rules_off("cpu_chain_mean"):
        apart = _names(graph)
        assert "global_mean_blocked" not in apart and ("reduce_mean" in apart or "global_avg_pool2d" in apart), apart
        _close(hf.compile(graph, target="cpu", space=0), rng, size, ref)


def test_other_means_are_refused(rng, cpu_backend, reduce_plugin):
    """A mean over (H,) only, or over (C, H, W), leaves its convolution writing NCHW; a
    global mean of a graph input stays the generic reduction."""
    lanes = blocked_lanes(cpu_backend.detect_target())
    w = hf.constant(_w(rng, 2 * lanes, lanes, 1, 1))
    x = hf.symbol((1, lanes, 5, 7), "float32")
    for axes in ((2,), (1, 2, 3)):
        names = _names(hf.trace(hf.ops.reduce_mean(hf.ops.relu(hf.ops.conv2d(x, w)), axes=axes), [x]))
        assert "global_mean_blocked" not in names and "from_blocked" not in names, (axes, names)
    names = _names(hf.trace(hf.ops.reduce_mean(x, axes=(2, 3), keepdims=True), [x]))
    assert names == ["reduce_mean"], names
