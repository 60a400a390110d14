"""A NaN in a max pool's window is the window's maximum (numpy's maximum, torch's
max_pool2d and the ONNX reference's MaxPool / GlobalMaxPool; onnxruntime 1.32's CPU
MaxPool drops it): session 14. Every candidate of the flat and the channel-blocked CPU
templates on this machine's ISA and on AVX2 (gcc told -mno-avx512f), the generic
(auto-scheduled) max_pool2d on float32 and float16 through hf.compile on the CPU and
(``-m cuda``) the GPU, and a global max pool; the windows of test_cpu_max_pool.py (odd
and prime sizes, strides, dilation, uneven pads, ceil mode, windows outside the image),
NaN at the first, a middle or the last tap inside the image of every third window, NaN
sprinkled among +-inf, whole planes NaN, and clean windows left exact. Outputs are
poisoned with a value no window can give (NaN cannot poison a NaN result), checked
overwritten.

Which zero a window gives when it holds both -0.0 and 0.0 follows the fold order (numpy's
too: np.max([-0.0, 0.0]) is 0.0, np.max([0.0, -0.0]) is -0.0) and is not checked here;
the elementwise maximum/minimum follow numpy's exactly (test_nan_max_min.py)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_ops.cpu_blocked import blocked_lanes
from hidet_plugin_ops.cpu_max_pool import CpuMaxPool2d
from hidet_plugin_ops.cpu_max_pool_blocked import CpuMaxPool2dBlocked

from .cpu_candidates import ISAS, block, isa_target
from .test_cpu_max_pool import CASES, max_pool64
from .test_cpu_max_pool_blocked import _blocked_pool

POISON = 12345.0      # the inputs stay in [-4, 4] (and +-inf): no window gives it
PATTERNS = ["first", "middle", "last", "sprinkled", "plane"]


def _taps_inside(case, i, j, h, w):
    _, kernel, stride, pads, dilation, _ = case
    taps = [(i * stride[0] - pads[0] + r * dilation[0], j * stride[1] - pads[1] + q * dilation[1])
            for r in range(kernel[0]) for q in range(kernel[1])]
    return [(hh, ww) for hh, ww in taps if 0 <= hh < h and 0 <= ww < w]


def nan_input(rng, case, channels, pattern, out_hw):
    """x of `case`'s shape with `channels` channels, NaN placed by `pattern`."""
    n, _, h, w = case[0]
    x = rng.uniform(-4, 4, (n, channels, h, w)).astype(np.float32)
    if pattern == "sprinkled":
        x[rng.random(x.shape) < 0.08] = np.inf
        x[rng.random(x.shape) < 0.08] = -np.inf
        x[rng.random(x.shape) < 0.03] = np.nan
    elif pattern == "plane":
        x[:, 1] = np.nan                                 # every window of channel 1: NaN
        x[:, 0] = -np.inf                                # channel 0: -inf everywhere
    else:
        for i in range(out_hw[0]):
            for j in range(out_hw[1]):
                taps = _taps_inside(case, i, j, h, w)
                if taps and (i + 2 * j) % 3 == 0:
                    hh, ww = taps[{"first": 0, "middle": len(taps) // 2, "last": -1}[pattern]]
                    x[:, (i + j) % channels, hh, ww] = np.nan
    return x


def _check(out, ref, what):
    assert not (out == POISON).any(), f"{what}: an output element was never written"
    np.testing.assert_array_equal(out, ref.astype(np.float32), err_msg=what)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_templates_keep_a_nan(cpu_backend, op_target, rng, case, pattern, isa, monkeypatch):
    if op_target != "cpu":
        pytest.skip("the CPU templates")
    target = isa_target(cpu_backend, isa, monkeypatch)
    x_shape, kernel, stride, pads, dilation, ceil_mode = case
    y = hf.ops.max_pool2d(hf.symbol(x_shape, "float32"), kernel, stride, pads, dilation, ceil_mode=ceil_mode)
    x = nan_input(rng, case, x_shape[1], pattern, tuple(y.shape[2:]))
    ref = max_pool64(x, kernel, stride, pads, dilation, ceil_mode)
    if pattern in ("first", "middle", "last"):
        assert np.isnan(ref).any() and not np.isnan(ref).all(), "the pattern gives NaN and clean windows"
    task, attributes = y.producer.task, dict(y.producer.attributes)
    for params in CpuMaxPool2d().space(target, 1):
        compiled = compile_scheduled(task, CpuMaxPool2d().build(task, attributes, params, target), cpu_backend, target)
        out = np.full(ref.shape, POISON, np.float32)
        compiled.run([x], [out])
        _check(out, ref, f"flat {case} {pattern} {isa} {params}")
    # the blocked template: two channel blocks of the target's lanes
    lanes = blocked_lanes(target)
    n, _, h, w = x_shape
    xw = nan_input(rng, case, 2 * lanes, pattern, tuple(y.shape[2:]))
    ref = block(max_pool64(xw, kernel, stride, pads, dilation, ceil_mode), lanes)
    yb = _blocked_pool((n, 2, h, w, lanes), kernel, stride, pads, dilation, ceil_mode)
    task, attributes = yb.producer.task, dict(yb.producer.attributes)
    for params in CpuMaxPool2dBlocked().space(target, 1):
        scheduled = CpuMaxPool2dBlocked().build(task, attributes, params, target)
        out = np.full(ref.shape, POISON, np.float32)
        compile_scheduled(task, scheduled, cpu_backend, target).run([block(xw, lanes)], [out])
        _check(out, ref, f"blocked {case} {pattern} {isa} {params}")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[4], CASES[7]], ids=str)
def test_generic_schedule_keeps_a_nan(runner, case, pattern, dtype, rng):
    """The operator through hf.compile on the CPU and, with ``-m cuda``, the GPU
    (op_target): float16 (the auto-scheduler's kernel on the CPU) and float32 with an
    epilogue (the CPU template grafts it; the GPU's is generic)."""
    x_shape, kernel, stride, pads, dilation, ceil_mode = case
    xs = hf.symbol(x_shape, dtype)
    y = hf.ops.max_pool2d(xs, kernel, stride, pads, dilation, ceil_mode=ceil_mode)
    x = nan_input(rng, case, x_shape[1], pattern, tuple(y.shape[2:])).astype(dtype)
    ref = max_pool64(x.astype(np.float64), kernel, stride, pads, dilation, ceil_mode)
    if dtype == "float32":            # an epilogue fused in
        y = y + 1.0
        ref = ref + 1.0
    (got,) = runner.run(y, {xs: x})
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, ref.astype(dtype), err_msg=f"{case} {pattern} {dtype}")


@pytest.mark.parametrize("nan_at", ["first", "last", "none"])
def test_global_max_pool_keeps_a_nan(runner, nan_at, rng):
    """A window the size of the plane (ONNX GlobalMaxPool's lowering), 13x17."""
    x = rng.uniform(-3, 3, (2, 5, 13, 17)).astype(np.float32)
    x[0, 1, 0, 0] = x[1, 4, 0, 0] = 9.0
    if nan_at != "none":
        hh, ww = (0, 0) if nan_at == "first" else (12, 16)
        x[0, 1, hh, ww] = np.nan
        x[1, 3, 6, 11] = np.nan
        x[1, 2] = np.nan
    xs = hf.symbol(x.shape, "float32")
    (got,) = runner.run(hf.ops.max_pool2d(xs, (13, 17), 1, 0), {xs: x})
    np.testing.assert_array_equal(got, np.max(x, axis=(2, 3), keepdims=True))
    assert np.isnan(got).sum() == (3 if nan_at != "none" else 0)
