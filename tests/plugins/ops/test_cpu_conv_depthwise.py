"""The CPU depthwise convolution (``ops.conv2d_depthwise_cpu``, cpu_depthwise_conv.py).

Every candidate of the level-1 space runs on fresh random inputs with a poisoned (NaN)
output against a float64 numpy reference, on this machine's ISA and on AVX2 (the
target says 256-bit vectors and gcc is told ``-mno-avx512f``): odd and prime sizes,
strides 1, 2 and 3 (row phases; column phases, or with ``cols1`` every column computed
and the store subsampling), dilations,
asymmetric pads, windows larger than the image, channel multipliers, planes narrower
than one vector (the flat phase tile runs across rows), planes cut into several row
blocks and small planes grouped into items (a short last group included). A compiled graph fuses bias and a relu6 clip onto the stores.
"""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_plugin_ops.cpu_depthwise_conv import (
    LATENCY_CHAINS, CpuDepthwiseConv2d, depthwise_space, phase_geometry, rows_per_item, vectors_per_step,
)

from .cpu_candidates import ISAS, check_candidates, isa_target

TEMPLATE = CpuDepthwiseConv2d()



def depthwise64(x, w, b, stride, pads, dilation):
    """float64 reference, written independently of the kernel: zero-padded input, one
    window per output element, output channel o reads input channel o // mult."""
    (sh, sw), (dh, dw) = stride, dilation
    top, left, bottom, right = pads
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    mult = o // c
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, o, oh, ow))
    for oc in range(o):
        for r in range(kh):
            for q in range(kw):
                patch = xp[:, oc // mult, r * dh: r * dh + sh * (oh - 1) + 1: sh, q * dw: q * dw + sw * (ow - 1) + 1: sw]
                y[:, oc] += patch * float(w[oc, 0, r, q])
    return y + (b.astype(np.float64)[None, :, None, None] if b is not None else 0.0)


def _task(x_shape, mult, kernel, stride, pads, dilation, bias):
    c = x_shape[1]
    x = hf.symbol(x_shape, "float32")
    w = hf.symbol((c * mult, 1) + kernel, "float32")
    b = hf.symbol((c * mult,), "float32") if bias else None
    y = hf.ops.conv2d(x, w, b, stride=stride, padding=pads, dilation=dilation, groups=c)
    return y.producer.task, dict(y.producer.attributes), tuple(y.shape)


CASES = [  # x shape, multiplier, kernel, stride, pads (top, left, bottom, right), dilation, bias
    ((1, 5, 7, 7), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),        # MobileNet's 7x7 planes
    ((2, 3, 13, 11), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),     # stride 2, odd sizes
    ((1, 4, 29, 31), 2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),      # multiplier 2, prime sizes
    ((1, 3, 17, 23), 1, (5, 5), (2, 1), (2, 1, 0, 3), (1, 2), True),      # asymmetric everything
    ((1, 2, 19, 37), 1, (3, 3), (3, 3), (1, 2, 2, 1), (2, 2), True),      # stride 3, dilated
    ((1, 7, 1, 1), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),        # one pixel
    ((1, 2, 3, 4), 3, (1, 3), (1, 1), (0, 4, 0, 4), (1, 1), False),       # columns of padding only
    ((1, 3, 5, 5), 1, (3, 3), (1, 1), (4, 4, 4, 4), (1, 1), True),        # rows and columns of padding only
    ((1, 2, 67, 61), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),      # several row blocks per plane
    ((1, 2, 61, 67), 1, (3, 3), (2, 2), (0, 0, 1, 1), (1, 1), False),     # row blocks at stride 2
    ((2, 11, 7, 7), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),       # planes grouped, the last group short
    ((1, 5, 6, 5), 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),        # grouped across a multiplier
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_candidates_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, mult, kernel, stride, pads, dilation, bias = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    task, attributes, y_shape = _task(x_shape, mult, kernel, stride, pads, dilation, bias)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((c * mult, 1) + kernel).astype(np.float32)
    b = rng.standard_normal(c * mult).astype(np.float32) if bias else None
    ref = depthwise64(x, w, b, stride, pads, dilation)
    assert ref.shape == y_shape
    space = depthwise_space(target, 1)
    assert len(space) > 1

    def compare(y, params):
        err = np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30)
        assert err < 1e-5, f"{case} {isa} {params}: relative error {err:.3g}"

    check_candidates(cpu_backend, TEMPLATE, task, attributes, space, target, [x, w] + ([b] if bias else []), y_shape,
                     compare)


def test_tiles_come_from_the_machine():
    base = {"cores": 2, "l1d_bytes": 32 << 10, "l2_bytes": 1 << 20}
    avx512 = Target("cpu", "x86-64", {**base, "vector_bits": 512})
    avx2 = Target("cpu", "x86-64", {**base, "vector_bits": 256})
    # 3x3: 8 accumulators beside 9 weights with 32 registers, 6 with 16
    assert depthwise_space(avx512, 0) == [{"l1": 1.0, "unroll": 8}]
    assert depthwise_space(avx2, 0) == [{"l1": 1.0, "unroll": 6}]
    # pitch: the padded columns read (stride 2 computes every column, the store picks)
    assert phase_geometry((3, 3), (1, 1), (1, 1), 7) == (9, 2)
    assert phase_geometry((3, 3), (2, 2), (1, 1), 56) == (113, 1)
    # with column phases (the default at stride 2) a phase row holds every other column
    assert phase_geometry((3, 3), (2, 2), (1, 1), 56, cols=2) == (57, 1)
    assert phase_geometry((5, 5), (3, 3), (2, 2), 10, cols=3) == (12, 2)
    # a 7x7 plane is one item; a 112x112 one is cut into balanced row blocks in half of L1
    assert rows_per_item(avx512, (3, 3), (1, 1), (1, 1), 7, 7) == 7
    rb = rows_per_item(avx512, (3, 3), (1, 1), (1, 1), 112, 112)
    assert 1 < rb < 112 and (rb + 2 + rb) * 114 * 4 <= 16 << 10 and 112 % rb < rb
    small = Target("cpu", "x86-64", {**base, "l1d_bytes": 8 << 10, "vector_bits": 512})
    assert rows_per_item(small, (3, 3), (1, 1), (1, 1), 112, 112) < rb


def test_vectors_per_step_keeps_the_fmas_independent():
    """A step has at least LATENCY_CHAINS accumulators unless fewer vectors are left in
    the item: 96@112 stride 2 (10 rows of pitch 113) takes 8, not the 1 that computes
    71 vectors instead of 72; a 7x7 plane (63 floats) 4, not 8 (64 of 128 wasted)."""
    assert vectors_per_step(8, 10 * 113, 16) == 8
    assert vectors_per_step(8, 63, 16) == 4
    assert vectors_per_step(6, 28 * 30, 8) == 5        # 105 vectors: 21 steps of 5
    for u in range(1, 9):
        for flat in range(1, 400, 7):
            k = vectors_per_step(u, flat, 16)
            assert 1 <= k <= u
            assert k >= min(u, LATENCY_CHAINS) or -(-flat // 16) < min(u, LATENCY_CHAINS)


def test_compiled_graph_fuses_bias_and_relu6(rng):
    """MobileNet's block: depthwise 3x3 + bias + clip(0, 6): one kernel, right values."""
    x = hf.symbol((1, 6, 15, 15), "float32")
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    y = hf.ops.clip(hf.ops.conv2d(x, hf.constant(w), hf.constant(b), stride=2, padding=1, groups=6), 0.0, 6.0)
    fn = hf.compile(hf.trace(y, [x]), target="cpu", space=0)
    assert [t.scheduled.source for t in fn.tasks] == ["ops.conv2d_depthwise_cpu"]
    a = (3 * rng.standard_normal((1, 6, 15, 15))).astype(np.float32)
    ref = np.clip(depthwise64(a, w, b, (2, 2), (1, 1, 1, 1), (1, 1)), 0.0, 6.0)
    out = fn(a)
    assert np.abs(out - ref).max() / np.abs(ref).max() < 1e-5


def avg_pool64(x, kernel, stride, pads, include, ceil_mode):
    """float64 reference of avg_pool2d (pooling.py's semantics, written out per window)."""
    n, c, h, w = x.shape
    top, left, bottom, right = pads
    out = []
    for d, size, lo, hi in ((0, h, top, bottom), (1, w, left, right)):
        span = size + lo + hi - kernel[d]
        m = (-(-span // stride[d]) if ceil_mode else span // stride[d]) + 1
        if ceil_mode and (m - 1) * stride[d] >= size + lo:
            m -= 1
        out.append(m)
    y = np.zeros((n, c, *out))
    for i in range(out[0]):
        for j in range(out[1]):
            h0, w0 = i * stride[0] - top, j * stride[1] - left
            hs, he, ws, we = max(h0, 0), min(h0 + kernel[0], h), max(w0, 0), min(w0 + kernel[1], w)
            total = x[:, :, hs:he, ws:we].astype(np.float64).sum(axis=(2, 3))
            if include:
                count = (min(h0 + kernel[0], h + bottom) - h0) * (min(w0 + kernel[1], w + right) - w0)
            else:
                count = (he - hs) * (we - ws)
            y[:, :, i, j] = total / count
    return y


POOL_CASES = [  # x shape, kernel, stride, pads, count_include_pad, ceil_mode
    ((1, 7, 35, 35), (3, 3), (1, 1), (1, 1, 1, 1), True, False),     # Inception's branch pools
    ((2, 3, 11, 13), (3, 3), (1, 1), (1, 1, 1, 1), False, False),
    ((1, 4, 17, 15), (3, 2), (2, 2), (1, 0, 1, 1), False, True),     # ceil mode: windows past the pads
    ((1, 3, 9, 9), (5, 5), (3, 3), (2, 2, 2, 2), True, True),
    ((1, 19, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), True, False),      # grouped 4x4 planes
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_avg_pool_candidates_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    from hidet_plugin_ops.cpu_depthwise_conv import CpuAvgPool2d

    x_shape, kernel, stride, pads, include, ceil_mode = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    xs = hf.symbol(x_shape, "float32")
    y = hf.ops.avg_pool2d(xs, kernel, stride, pads, ceil_mode=ceil_mode, count_include_pad=include)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    x = rng.standard_normal(x_shape).astype(np.float32)
    ref = avg_pool64(x, kernel, stride, pads, include, ceil_mode)
    assert ref.shape == tuple(y.shape)
    template = CpuAvgPool2d()
    assert template.applies(task, attributes)

    def compare(out, params):
        err = np.abs(out - ref).max() / np.abs(ref).max()
        assert err < 1e-6, f"{case} {isa} {params}: relative error {err:.3g}"

    check_candidates(cpu_backend, template, task, attributes, template.space(target, 1), target, [x], ref.shape,
                     compare)


def test_compiled_graph_uses_the_pool_template(rng):
    x = hf.symbol((1, 5, 13, 13), "float32")
    fn = hf.compile(hf.trace(hf.ops.avg_pool2d(x, 3, 1, 1, count_include_pad=False), [x]), target="cpu", space=0)
    # a template, not the auto-schedule: since session 10 the rows-then-columns one
    # (cpu_avg_pool.py, priority 11) is the default; this one stays in the level-1 space
    assert [t.scheduled.source for t in fn.tasks] == ["ops.avg_pool2d_cpu_rows"]
    a = rng.standard_normal((1, 5, 13, 13)).astype(np.float32)
    assert np.abs(fn(a) - avg_pool64(a, (3, 3), (1, 1), (1, 1, 1, 1), False, False)).max() < 1e-6


def test_a_producer_of_x_is_grafted_onto_the_copy(rng):
    """x is read by element reads in the tile copy: relu(2x) -> depthwise -> relu is
    one kernel (a vector read of x would split the group into four launches)."""
    x = hf.symbol((1, 6, 15, 15), "float32")
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    y = hf.ops.relu(hf.ops.conv2d(hf.ops.relu(x * 2.0), hf.constant(w), None, stride=1, padding=1, groups=6))
    fn = hf.compile(hf.trace(y, [x]), target="cpu", space=0)
    assert fn.num_launches == 1
    assert [t.scheduled.source for t in fn.tasks] == ["ops.conv2d_depthwise_cpu"]
    a = rng.standard_normal((1, 6, 15, 15)).astype(np.float32)
    ref = np.maximum(depthwise64(np.maximum(2.0 * a, 0.0), w, None, (1, 1), (1, 1, 1, 1), (1, 1)), 0.0)
    assert np.abs(fn(a) - ref).max() / np.abs(ref).max() < 1e-5
