"""The CPU avg_pool2d template of rows then columns (cpu_avg_pool.py): every candidate
against a float64 reference written out per window, on odd and prime sizes, strides,
uneven pads, ceil mode and both divisors (positions inside the padded input or inside
the image); on this machine's ISA and on AVX2 (gcc told -mno-avx512f); outputs
poisoned with NaN first. And that it is the level-0 default for avg_pool2d."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_plugin_ops.cpu_avg_pool import CpuAvgPool2dRows

from .cpu_candidates import ISAS, check_candidates, isa_target


def avg_pool64(x, kernel, stride, pads, ceil_mode, include_pad):
    """float64 reference: the sum of the taps inside the image over the window's
    positions inside the padded input (`include_pad`, clipped at its end) or inside
    the image (pooling.py's semantics)."""
    n, c, h, w = x.shape
    top, left, bottom, right = pads
    out = []
    for d, size, lo, hi in ((0, h, top, bottom), (1, w, left, right)):
        span = size + lo + hi - (kernel[d] - 1) - 1
        m = (-(-span // stride[d]) if ceil_mode else span // stride[d]) + 1
        if ceil_mode and (m - 1) * stride[d] >= size + lo:
            m -= 1
        out.append(m)
    y = np.zeros((n, c, *out))
    x64 = x.astype(np.float64)
    for i in range(out[0]):
        for j in range(out[1]):
            h0, w0 = i * stride[0] - top, j * stride[1] - left
            total, inside = 0.0, 0
            for r in range(kernel[0]):
                for q in range(kernel[1]):
                    if 0 <= h0 + r < h and 0 <= w0 + q < w:
                        total = total + x64[:, :, h0 + r, w0 + q]
                        inside += 1
            if include_pad:
                count = (min(h0 + kernel[0], h + bottom) - h0) * (min(w0 + kernel[1], w + right) - w0)
            else:
                count = inside
            y[:, :, i, j] = total / count if count else np.nan     # no position counted: 0 / 0
    return y


CASES = [  # x shape, kernel, stride, pads (top, left, bottom, right), ceil mode, count_include_pad
    ((1, 5, 35, 35), (3, 3), (1, 1), (1, 1, 1, 1), False, True),      # Inception-V3's pools, as exported
    ((2, 3, 17, 19), (3, 3), (1, 1), (1, 1, 1, 1), False, False),
    ((1, 7, 13, 11), (3, 3), (2, 2), (0, 0, 0, 0), False, True),
    ((1, 3, 31, 29), (5, 3), (3, 2), (2, 0, 1, 1), False, True),       # uneven pads
    ((1, 3, 31, 29), (5, 3), (3, 2), (2, 0, 1, 1), False, False),
    ((1, 4, 17, 15), (3, 2), (2, 2), (1, 0, 1, 1), True, True),        # ceil mode: windows past the pads
    ((1, 4, 17, 15), (3, 2), (2, 2), (1, 0, 1, 1), True, False),
    ((1, 2, 16, 16), (3, 3), (2, 2), (1, 1, 1, 1), True, True),        # last window past the end padding
    ((1, 3, 1, 37), (1, 7), (1, 5), (0, 3, 0, 3), True, True),         # one row
    ((1, 6, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0), False, True),         # one window per plane
    ((1, 23, 5, 5), (3, 3), (1, 1), (1, 1, 1, 1), False, False),       # planes an item: 8 + 8 + 7
    ((1, 3, 5, 7), (2, 2), (1, 3), (3, 3, 3, 3), False, True),         # rows and columns with no tap inside
    ((1, 2, 11, 13), (3, 5), (1, 1), (2, 4, 2, 4), False, False),      # pads one less than the kernel
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_candidates_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, kernel, stride, pads, ceil_mode, include_pad = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    xs = hf.symbol(x_shape, "float32")
    y = hf.ops.avg_pool2d(xs, kernel, stride, pads, ceil_mode=ceil_mode, count_include_pad=include_pad)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    x = rng.standard_normal(x_shape).astype(np.float32)
    ref = avg_pool64(x, kernel, stride, pads, ceil_mode, include_pad)
    assert ref.shape == tuple(y.shape)
    template = CpuAvgPool2dRows()
    assert template.applies(task, attributes)
    space = template.space(target, 1)
    assert len(space) == 2
    check_candidates(cpu_backend, template, task, attributes, space, target, [x], ref.shape, lambda out, params:
                     np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6, err_msg=f"{case} {isa} {params}"))


def test_the_default_for_avg_pool2d_with_an_epilogue_grafted(rng):
    """hf.compile picks this template at space 0, and a relu after the pool runs in the
    same launch (element stores)."""
    x = rng.standard_normal((1, 6, 13, 13)).astype(np.float32)
    xs = hf.symbol(x.shape, "float32")
    y = hf.ops.relu(hf.ops.avg_pool2d(xs, 3, 1, 1))
    fn = hf.compile(hf.trace(y, inputs=[xs]), target="cpu", space=0)
    assert fn.num_launches == 1
    assert [t.scheduled.source for t in fn.tasks] == ["ops.avg_pool2d_cpu_rows"]
    ref = np.maximum(avg_pool64(x, (3, 3), (1, 1), (1, 1, 1, 1), False, True), 0.0)
    np.testing.assert_allclose(fn(x), ref, rtol=2e-6, atol=1e-6)


def test_refuses_windows_that_count_no_position(rng):
    """Padding as wide as the kernel with the divisor counting positions inside the image
    only: the corner windows count none (their mean is 0 / 0), and the template leaves
    them to the other schedules; with padding one narrower it applies."""
    xs = hf.symbol((1, 2, 5, 7), "float32")
    empty = hf.ops.avg_pool2d(xs, 2, 1, 2, count_include_pad=False)
    assert not CpuAvgPool2dRows().applies(empty.producer.task, dict(empty.producer.attributes))
    padded = hf.ops.avg_pool2d(xs, 2, 1, 2, count_include_pad=True)
    assert CpuAvgPool2dRows().applies(padded.producer.task, dict(padded.producer.attributes))
    fine = hf.ops.avg_pool2d(xs, 2, 1, 1, count_include_pad=False)
    assert CpuAvgPool2dRows().applies(fine.producer.task, dict(fine.producer.attributes))
    fn = hf.compile(hf.trace(empty, inputs=[xs]), target="cpu", space=0)
    assert [t.scheduled.source for t in fn.tasks] != ["ops.avg_pool2d_cpu_rows"]
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    ref = avg_pool64(x, (2, 2), (1, 1), (2, 2, 2, 2), False, False)
    out = fn(x)
    inside = ~np.isnan(ref)
    assert inside.sum() == 2 * 6 * 8      # rows 1..6, columns 1..8 of the 8 x 10 outputs
    np.testing.assert_allclose(out[inside], ref[inside], rtol=2e-6, atol=1e-6)
