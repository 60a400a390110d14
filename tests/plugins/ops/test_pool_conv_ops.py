"""Pooling and conv2d against loop-level numpy references (PyTorch semantics), and
the conv2d → im2col + matmul rewrite."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import symbol


def out_extent(n, k, s, pb, pe, d=1, ceil=False):
    span = n + pb + pe - d * (k - 1) - 1
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= n + pb:
        o -= 1
    return o


def pool_reference(a, kernel, stride, pads, dilation=(1, 1), ceil=False, kind="max", include_pad=True):
    a = a.astype(np.float64)
    n, c, h, w = a.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    top, left, bottom, right = pads
    oh = out_extent(h, kh, sh, top, bottom, dh, ceil)
    ow = out_extent(w, kw, sw, left, right, dw, ceil)
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - top, j * sw - left
            rows = [h0 + r * dh for r in range(kh)]
            cols = [w0 + q * dw for q in range(kw)]
            vals = [a[:, :, r, q] for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
            if kind == "max":
                out[:, :, i, j] = np.max(vals, axis=0)
            else:
                if include_pad:
                    count = (min(h0 + kh, h + bottom) - h0) * (min(w0 + kw, w + right) - w0)
                else:
                    count = (min(h0 + kh, h) - max(h0, 0)) * (min(w0 + kw, w) - max(w0, 0))
                out[:, :, i, j] = np.sum(vals, axis=0) / count
    return out


def pads4(padding):
    if isinstance(padding, int):
        return (padding,) * 4
    return tuple(padding) * 2 if len(padding) == 2 else tuple(padding)


POOL_CASES = [  # kernel, stride, padding, dilation, ceil_mode
    ((3, 3), (2, 2), 1, (1, 1), False),
    ((2, 3), (1, 2), (1, 0), (1, 1), True),
    ((3, 3), (2, 2), (0, 1, 1, 0), (1, 1), True),
    ((2, 2), (3, 3), 0, (2, 1), False),
    ((1, 1), (1, 1), 0, (1, 1), False),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d(case, dtype, rand, runner):
    kernel, stride, padding, dilation, ceil = case
    x = symbol((2, 3, 7, 8), dtype)
    a = rand(x.shape, dtype)
    y = ops.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil)
    expected = pool_reference(a, kernel, stride, pads4(padding), dilation, ceil, "max")
    out, = runner.run(y, {x: a})
    runner.assert_close(out, expected, dtype, tol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[3] == (1, 1)], ids=str)
def test_avg_pool2d(case, include_pad, dtype, rand, runner):
    kernel, stride, padding, _, ceil = case
    x = symbol((1, 2, 7, 9), dtype)
    a = rand(x.shape, dtype)
    y = ops.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil, count_include_pad=include_pad)
    expected = pool_reference(a, kernel, stride, pads4(padding), ceil=ceil, kind="avg", include_pad=include_pad)
    out, = runner.run(y, {x: a})
    runner.assert_close(out, expected, dtype)


def test_max_pool2d_integers_and_default_stride(rand, runner):
    x = symbol((1, 2, 6, 7), "int32")
    a = rand(x.shape, "int32", -50, 50)
    y = ops.max_pool2d(x, 2)  # stride defaults to the kernel
    out, = runner.run(y, {x: a})
    runner.assert_close(out, pool_reference(a, (2, 2), (2, 2), (0,) * 4).astype(np.int32), "int32")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_global_avg_pool2d(dtype, rand, runner):
    x = symbol((2, 3, 5, 7), dtype)
    a = rand(x.shape, dtype)
    out, = runner.run(ops.global_avg_pool2d(x), {x: a})
    runner.assert_close(out, a.astype(np.float64).mean(axis=(2, 3), keepdims=True), dtype)


# ------------------------------------------------------------------ conv2d

def conv_reference(a, w, b, stride, pads, dilation, groups):
    a, w = a.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = a.shape
    o, cig, kh, kw = w.shape
    top, left, bottom, right = pads
    padded = np.pad(a, [(0, 0), (0, 0), (top, bottom), (left, right)])
    oh = out_extent(h, kh, stride[0], top, bottom, dilation[0])
    ow = out_extent(wd, kw, stride[1], left, right, dilation[1])
    out = np.zeros((n, o, oh, ow))
    cog = o // groups
    for oc in range(o):
        g = oc // cog
        for r in range(kh):
            for q in range(kw):
                rows = padded[:, g * cig:(g + 1) * cig,
                              r * dilation[0]: r * dilation[0] + stride[0] * (oh - 1) + 1: stride[0],
                              q * dilation[1]: q * dilation[1] + stride[1] * (ow - 1) + 1: stride[1]]
                out[:, oc] += np.einsum("nchw,c->nhw", rows, w[oc, :, r, q])
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return out


CONV_CASES = [  # x shape, w shape, stride, padding, dilation, groups, bias
    ((1, 3, 7, 6), (4, 3, 3, 3), (1, 1), 1, (1, 1), 1, True),
    ((2, 4, 9, 8), (6, 2, 3, 2), (2, 1), (1, 0), (1, 1), 2, False),
    ((1, 3, 8, 9), (5, 3, 2, 3), (2, 3), (0, 1, 2, 1), (2, 1), 1, True),
    ((1, 4, 5, 5), (4, 1, 3, 3), (1, 1), 1, (1, 1), 4, True),   # depthwise
    ((1, 5, 3, 4), (7, 5, 1, 1), (1, 1), 0, (1, 1), 1, False),  # pointwise
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv2d_direct(case, dtype, rand, runner):
    xs, ws, stride, padding, dilation, groups, has_bias = case
    x, w = symbol(xs, dtype), symbol(ws, dtype)
    a, wa = rand(xs, dtype, -1, 1), rand(ws, dtype, -1, 1)
    feed = {x: a, w: wa}
    b = ba = None
    if has_bias:
        b = symbol((ws[0],), dtype)
        ba = rand(b.shape, dtype)
        feed[b] = ba
    y = ops.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    assert y.producer.name == "conv2d"
    assert y.producer.attributes == {"stride": stride, "padding": pads4(padding), "dilation": dilation,
                                     "groups": groups}
    out, = runner.run(y, feed)
    expected = conv_reference(a, wa, ba, stride, pads4(padding), dilation, groups)
    runner.assert_close(out, expected, dtype, tol=1e-2 if dtype == "float16" else 1e-5)


def test_im2col_layout(rand, runner):
    x = symbol((2, 3, 5, 4))
    a = rand(x.shape)
    cols = ops.im2col(x, (2, 3), stride=1, padding=(1, 0), dilation=1)
    out, = runner.run(cols, {x: a})
    padded = np.pad(a, [(0, 0), (0, 0), (1, 1), (0, 0)])
    oh, ow = 6, 2
    expected = np.empty((2 * oh * ow, 3 * 2 * 3), np.float32)
    for n in range(2):
        for i in range(oh):
            for j in range(ow):
                expected[(n * oh + i) * ow + j] = padded[n, :, i:i + 2, j:j + 3].reshape(-1)
    runner.assert_close(out, expected, "float32", tol=0)
    assert cols.producer.task.is_injective()
