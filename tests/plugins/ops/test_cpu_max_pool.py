"""The CPU max_pool2d template (cpu_max_pool.py): every candidate against a float64
reference written out per window, on odd and prime sizes, strides, dilation, uneven
pads, ceil mode and windows with no tap inside the image; on this machine's ISA and on
AVX2 (gcc told -mno-avx512f); outputs poisoned with NaN first."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_ops.cpu_max_pool import CpuMaxPool2d, column_split

from .cpu_candidates import ISAS, check_candidates, isa_target


def max_pool64(x, kernel, stride, pads, dilation, ceil_mode):
    """float64 reference: the maximum over the taps of each window that lie inside the
    image, -inf where none does (pooling.py's semantics)."""
    n, c, h, w = x.shape
    top, left, bottom, right = pads
    out = []
    for d, size, lo, hi in ((0, h, top, bottom), (1, w, left, right)):
        span = size + lo + hi - dilation[d] * (kernel[d] - 1) - 1
        m = (-(-span // stride[d]) if ceil_mode else span // stride[d]) + 1
        if ceil_mode and (m - 1) * stride[d] >= size + lo:
            m -= 1
        out.append(m)
    y = np.full((n, c, *out), -np.inf)
    x64 = x.astype(np.float64)
    for i in range(out[0]):
        for j in range(out[1]):
            for r in range(kernel[0]):
                for q in range(kernel[1]):
                    hh, ww = i * stride[0] - top + r * dilation[0], j * stride[1] - left + q * dilation[1]
                    if 0 <= hh < h and 0 <= ww < w:
                        y[:, :, i, j] = np.maximum(y[:, :, i, j], x64[:, :, hh, ww])
    return y


CASES = [  # x shape, kernel, stride, pads (top, left, bottom, right), dilation, ceil mode
    ((1, 5, 23, 23), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),     # ResNet-50's stem pool, small
    ((2, 3, 17, 19), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), False),     # Inception-V3's pools
    ((1, 7, 13, 11), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),
    ((1, 3, 31, 29), (5, 3), (3, 2), (2, 0, 1, 1), (1, 2), False),     # uneven pads, dilation
    ((1, 4, 17, 15), (3, 2), (2, 2), (1, 0, 1, 1), (1, 1), True),      # ceil mode: windows past the pads
    ((1, 2, 5, 7), (2, 2), (1, 3), (3, 3, 3, 3), (1, 1), False),       # windows with no tap inside: -inf
    ((1, 3, 1, 37), (1, 7), (1, 5), (0, 3, 0, 3), (1, 1), True),       # one row
    ((1, 6, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0), (1, 1), False),       # one window per plane
    ((1, 23, 9, 9), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), False),      # planes an item: 12 + 11
    ((1, 2, 71, 71), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), False),     # Inception-V3's second pool, rows of 71
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_candidates_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, kernel, stride, pads, dilation, ceil_mode = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    xs = hf.symbol(x_shape, "float32")
    y = hf.ops.max_pool2d(xs, kernel, stride, pads, dilation, ceil_mode=ceil_mode)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    x = rng.standard_normal(x_shape).astype(np.float32)
    ref = max_pool64(x, kernel, stride, pads, dilation, ceil_mode)
    assert ref.shape == tuple(y.shape)
    template = CpuMaxPool2d()
    assert template.applies(task, attributes)
    space = template.space(target, 1)
    assert len(space) == 2
    check_candidates(cpu_backend, template, task, attributes, space, target, [x], ref.shape, lambda out, params:
                     np.testing.assert_array_equal(out, ref.astype(np.float32), err_msg=f"{case} {isa} {params}"))


def test_a_nan_in_a_window_is_its_maximum(cpu_backend):
    """The maximum is numpy's (a NaN is kept): a window holding a NaN gives NaN (session
    14; the windows without one are unchanged)."""
    x = np.arange(2 * 9 * 9, dtype=np.float32).reshape(1, 2, 9, 9)
    x[0, 0, 4, 4] = np.nan
    x[0, 1, 0:3, 0:3] = np.nan
    xs = hf.symbol(x.shape, "float32")
    y = hf.ops.max_pool2d(xs, 3, 3, 0)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    target = cpu_backend.detect_target()
    compiled = compile_scheduled(task, CpuMaxPool2d().build(task, attributes, {"rows": 0}, target), cpu_backend,
                                 target)
    out = np.zeros((1, 2, 3, 3), np.float32)
    compiled.run([x], [out])
    np.testing.assert_array_equal(out, max_pool64(x, (3, 3), (3, 3), (0,) * 4, (1, 1), False))
    assert np.isnan(out[0, 0, 1, 1]) and np.isnan(out[0, 1, 0, 0]) and np.isnan(out).sum() == 2


def test_column_split():
    # 3x3/2, pad 1 on a 112-wide row: column 0 reads the padding, 1..55 are inside
    assert column_split(56, 112, 3, 2, 1, 1) == (1, 56, [(0, (1, 2))])
    # every window reads the padding on both sides
    a, b, border = column_split(3, 2, 4, 1, 1, 2)
    assert (a, b) == (0, 0) and [o for o, _ in border] == [0, 1, 2]
    assert border[0][1] == (2, 3) and border[2][1] == (0, 1)


def test_compiled_graph_uses_the_template_and_grafts_the_epilogue(rng):
    x = hf.symbol((1, 6, 19, 17), "float32")
    fn = hf.compile(hf.trace(hf.ops.relu(hf.ops.max_pool2d(x, 3, 2, 1) - 0.5), [x]), target="cpu", space=0)
    assert [t.scheduled.source for t in fn.tasks] == ["ops.max_pool2d_cpu"]
    assert fn.num_launches == 1
    a = rng.standard_normal((1, 6, 19, 17)).astype(np.float32)
    ref = np.maximum(max_pool64(a, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False) - 0.5, 0.0)
    assert np.abs(fn(a) - ref).max() < 1e-6


def test_other_dtypes_keep_the_generic_schedule():
    xs = hf.symbol((1, 3, 9, 9), "float16")
    y = hf.ops.max_pool2d(xs, 3, 2, 1)
    assert not CpuMaxPool2d().applies(y.producer.task, dict(y.producer.attributes))


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_the_row_buffer_stays_within_its_bound(cpu_backend, rng, kind):
    """A window as wide as a 1009-wide row over one output column: an item may not
    take ITEM_OUTPUTS rows of 1009+ floats on the thread's stack (152 KB here), only as
    many as BUFFER_FLOATS holds; the result is still the reference's."""
    import re

    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_ops.cpu_avg_pool import CpuAvgPool2dRows
    from hidet_plugin_ops.cpu_max_pool import BUFFER_FLOATS

    from .test_cpu_avg_pool import avg_pool64

    shape, kernel = (1, 3, 41, 1009), (3, 1009)
    xs = hf.symbol(shape, "float32")
    y = hf.ops.max_pool2d(xs, kernel, 1, 0) if kind == "max" else hf.ops.avg_pool2d(xs, kernel, 1, 0)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    template = CpuMaxPool2d() if kind == "max" else CpuAvgPool2dRows()
    target = cpu_backend.detect_target()
    scheduled = template.build(task, attributes, {"rows": 0}, target)
    sizes = [int(s) for s in re.findall(r"float buf\[(\d+)\]", generate_source(scheduled, cpu_backend, target))]
    assert sizes and max(sizes) <= BUFFER_FLOATS
    x = rng.standard_normal(shape).astype(np.float32)
    out = np.full(tuple(y.shape), np.nan, np.float32)
    compile_scheduled(task, scheduled, cpu_backend, target).run([x], [out])
    if kind == "max":
        ref = max_pool64(x, kernel, (1, 1), (0,) * 4, (1, 1), False)
        np.testing.assert_array_equal(out, ref.astype(np.float32))
    else:
        np.testing.assert_allclose(out, avg_pool64(x, kernel, (1, 1), (0,) * 4, False, True), rtol=2e-6, atol=1e-6)
