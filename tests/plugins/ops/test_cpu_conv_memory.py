"""How the CPU convolution templates meet memory in a model, where a kernel's input and
output are usually not in cache: the flat form's channel-major stores and the pointwise
form's prefetch of the next tile's input (docs/perf_notes.md, "cpuconv, session 7").

Correctness against float64 (fresh inputs, poisoned outputs where the kernel runs
alone), the built code where the choice is the machine's (faked CPU tables: L2 sizes).
"""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_ops import cpu_conv
from hidet_plugin_ops.cpu_conv_pointwise import prefetch_ahead
from hidet_plugin_ops.cpu_conv_template import CpuDirectConv2d, conv_space

from .conv_packing import _packed, _task

TEMPLATE = CpuDirectConv2d()


def conv64(x, w, b, stride, pads, dilation):
    """float64 1x1 convolution (stride 1, no padding: the forms tested here)."""
    assert stride == (1, 1) and pads == (0, 0, 0, 0) and dilation == (1, 1) and w.shape[2:] == (1, 1)
    y = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    return y + b.astype(np.float64)[None, :, None, None]



# 3x7 = 21 pixels: fewer than one pointwise tile on AVX2 (3 vectors of 8) as on AVX-512,
# so the flat form on both (a 5x9 image is the pointwise form's on AVX2)
@pytest.mark.parametrize("x_shape,o", [((2, 23, 7, 7), 53), ((1, 160, 7, 7), 67), ((3, 11, 3, 7), 37)], ids=str)
def test_flat_form_stores_through_channels_with_epilogues(rng, x_shape, o):
    """The flat form (1x1 stride 1 on small images: MobileNet-V2's 7x7 stages) stores
    through a channel-major buffer; a relu6 clip and a residual add graft onto those
    stores (one launch), every channel and pixel lands where it belongs (ragged last
    channel block, tiles of two widths, batches), against float64, fresh inputs."""
    c = x_shape[1]
    x = hf.symbol(x_shape, "float32")
    r = hf.symbol((x_shape[0], o) + x_shape[2:], "float32")
    w = (rng.standard_normal((o, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    y = hf.ops.add(hf.ops.clip(hf.ops.conv2d(x, hf.constant(w), hf.constant(b)), 0.0, 6.0), r)
    fn = hf.compile(hf.trace(y, inputs=[x, r]), target="cpu", space=0)
    assert [t.scheduled.source for t in fn.tasks] == ["ops.conv2d_cpu_direct"] and fn.num_launches == 1
    assert any("_flat" in name for name in fn.tasks[0].scheduled.module.functions)     # the flat form ran
    for _ in range(2):
        xv = rng.standard_normal(x_shape).astype(np.float32)
        rv = rng.standard_normal((x_shape[0], o) + x_shape[2:]).astype(np.float32)
        ref = np.clip(conv64(xv, w, b, (1, 1), (0, 0, 0, 0), (1, 1)), 0.0, 6.0) + rv
        got = fn(xv, rv)
        assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-5


def _source(target, x_shape, o=64):
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    ob = cpu_conv.block_width(target, o)
    task, attributes, _ = _task(x_shape, (o, x_shape[1], 1, 1), ob, True, (1, 1), (0, 0, 0, 0), (1, 1))
    module = TEMPLATE.build(task, attributes, dict(conv_space(target, 0, ob)[0], form="pixels"), target).module
    return generate(lower(module, "cpu"), target)


@pytest.mark.parametrize("vector_bits", [512, 256])
def test_pointwise_prefetch_where_the_input_leaves_l2(vector_bits):
    """The pointwise form prefetches the next tile's input where one image of x is more
    than half of L2 (read from the target): MobileNet-V2's 32x112x112 (1.6 MB) with a
    1 MB L2, not its 96x14x14 (75 KB); the same shape flips with the L2 size."""
    def target(l2):
        return Target("cpu", "x86-64", {"cores": 2, "vector_bits": vector_bits, "l1d_bytes": 32 << 10,
                                        "l2_bytes": l2, "fma": True})

    assert prefetch_ahead((1, 32, 112, 112), 1 << 20) and not prefetch_ahead((1, 96, 14, 14), 1 << 20)
    assert "__builtin_prefetch" in _source(target(1 << 20), (1, 32, 112, 112))
    assert "__builtin_prefetch" not in _source(target(1 << 20), (1, 96, 14, 14))
    assert "__builtin_prefetch" in _source(target(64 << 10), (1, 96, 14, 14))
    assert "__builtin_prefetch" not in _source(target(4 << 20), (1, 32, 112, 112))


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("case", [((2, 5, 13, 17), 37), ((1, 8, 16, 12), 16), ((1, 19, 7, 11), 40)], ids=str)
def test_pointwise_with_prefetch_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    """With a tiny L2 every pointwise shape prefetches: the last full tile's prefetch
    stops at the image's end, a partial last tile has none; the results are the
    float64 convolution, every element written once (NaN-poisoned output); on this
    machine's ISA and as an AVX2 build (256-bit target, gcc told ``-mno-avx512f``)."""
    x_shape, o = case
    native = cpu_backend.detect_target()
    target = Target("cpu", native.arch, {**native.properties, "l2_bytes": 1024})
    if isa == "avx2":
        from hidet_plugin_cpu import build

        monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
        target = Target("cpu", native.arch, {**target.properties, "vector_bits": 256})
    ob = cpu_conv.block_width(target, o)
    task, attributes, y_shape = _task(x_shape, (o, x_shape[1], 1, 1), ob, True, (1, 1), (0, 0, 0, 0), (1, 1))
    scheduled = TEMPLATE.build(task, attributes, dict(conv_space(target, 0, ob)[0], form="pixels"), target)
    assert any("_pixels" in name for name in scheduled.module.functions)
    compiled = compile_scheduled(task, scheduled, cpu_backend, target)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((o, x_shape[1], 1, 1)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    y = np.full(y_shape, np.nan, np.float32)
    compiled.run([x, _packed(w, ob), b], [y])
    assert not np.isnan(y).any()
    ref = conv64(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1))
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-5
