"""The channel-blocked layout's kernels (cpu_blocked.py): the depthwise kernel
(``ops.conv2d_dw_blocked_cpu``) and ``conv2d_packed`` writing or reading the blocked
form (``ops.conv2d_cpu_direct``: its direct, flat and pointwise candidates).

Every candidate runs on fresh random inputs with a poisoned (NaN) output against a
float64 numpy reference (the NCHW convolution, blocked afterwards by numpy), on this
machine's ISA and on AVX2 (the target says 256-bit vectors, so 8-lane blocks, and gcc
is told ``-mno-avx512f``): channel counts that do not fill the last block (the tail:
its lanes must come out zero), odd and prime sizes, strides 1 and 2, asymmetric pads,
dilation, with and without bias. The layout operators are checked against numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_ops import cpu_blocked, cpu_conv
from hidet_plugin_ops.cpu_conv_template import CpuDirectConv2d
from hidet_plugin_ops.cpu_depthwise_blocked import CpuDepthwiseBlocked

from .conv_packing import _packed
from .cpu_candidates import ISAS, isa_target
from .test_cpu_conv import conv64
from .test_cpu_conv_depthwise import depthwise64


def block64(y, lanes):
    """NCHW → [N, ceil(C/L), H, W, L] in numpy, zeros past C (the layout's definition)."""
    n, c, h, w = y.shape
    cb = -(-c // lanes)
    out = np.zeros((n, cb * lanes, h, w), y.dtype)
    out[:, :c] = y
    return np.ascontiguousarray(out.reshape(n, cb, lanes, h, w).transpose(0, 1, 3, 4, 2))


def _check(out, ref, what):
    assert not np.isnan(out).any(), f"{what}: an output element was never written"
    err = np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < 1e-5, f"{what}: relative error {err:.3g}"


DW_CASES = [  # x shape (NCHW), kernel, stride, pads, dilation, bias
    ((1, 37, 13, 11), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),     # 37 channels: a tail block
    ((2, 5, 17, 19), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),      # fewer channels than one vector
    ((1, 32, 29, 31), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),    # whole blocks, stride 2, prime sizes
    ((1, 23, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),       # a 7x7 plane: one item
    ((1, 9, 19, 23), (5, 3), (2, 1), (2, 0, 1, 2), (1, 2), True),      # asymmetric pads, dilation
    ((1, 3, 3, 4), (3, 3), (1, 1), (3, 3, 3, 3), (1, 1), True),        # rows/columns of padding only
    ((1, 17, 61, 9), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),      # several row blocks per plane
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", DW_CASES, ids=str)
def test_depthwise_blocked_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, kernel, stride, pads, dilation, bias = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    lanes = cpu_blocked.blocked_lanes(target)
    assert lanes == (8 if isa == "avx2" else target.get("vector_bits") // 32)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((c, 1) + kernel).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    xs = hf.symbol(block64(x, lanes).shape, "float32")
    wpk = cpu_blocked.blocked_pack(hf.symbol(w.shape, "float32"), lanes)
    bpk = cpu_blocked.blocked_pack(hf.symbol((c,), "float32"), lanes) if bias else None
    y = cpu_blocked.conv2d_depthwise_blocked(xs, wpk, bpk, stride, pads, dilation)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    ref = block64(depthwise64(x, w, b, stride, pads, dilation), lanes)
    assert ref.shape == tuple(y.shape)
    template = CpuDepthwiseBlocked()
    assert template.applies(task, attributes)
    space = template.space(target, 1)
    assert len(space) > 1
    args = [block64(x, lanes), np.ascontiguousarray(block64(w.reshape(1, c, *kernel), lanes)[0])]
    if bias:
        args.append(block64(b.reshape(1, c, 1, 1), lanes).reshape(-1, lanes))
    for params in space:
        compiled = compile_scheduled(task, template.build(task, attributes, params, target), cpu_backend, target)
        out = np.full(ref.shape, np.nan, np.float32)
        compiled.run(args, [out])
        _check(out, ref, f"{case} {isa} {params}")


CONV_CASES = [  # x shape, w shape, stride, pads, dilation, bias, x blocked, y blocked
    ((1, 3, 23, 29), (32, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False, True),    # the stem, blocked out
    ((1, 5, 13, 11), (37, 5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, False, True),   # tail lanes
    ((1, 13, 17, 19), (41, 13, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True, False, True),  # expansion, flat form
    ((2, 7, 7, 7), (96, 7, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True, False, True),     # whole blocks
    ((1, 37, 13, 11), (23, 37, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True, True, False),  # projection: tail in x
    ((1, 32, 29, 31), (16, 32, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False, True, False),
    ((1, 19, 9, 9), (29, 19, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True, True, True),     # blocked both ways
    ((1, 11, 12, 10), (9, 11, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), True, True, False),   # a 3x3 reading blocked
    ((1, 19, 5, 42), (37, 19, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True, True, True),    # flat tiles inside rows
    ((1, 19, 5, 42), (37, 19, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False, True, False),  # (14 and 6 divide 42)
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv2d_packed_blocked_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, w_shape, stride, pads, dilation, bias, x_blocked, y_blocked = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    lanes = cpu_blocked.blocked_lanes(target)
    ob = cpu_conv.block_width(target, w_shape[0])
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    xin = block64(x, lanes) if x_blocked else x
    packed = cpu_conv.pack_conv_weight(hf.symbol(w_shape, "float32"), ob)
    y = cpu_conv.conv2d_packed(hf.symbol(xin.shape, "float32"), packed, hf.symbol(b.shape, "float32") if bias else None,
                               w_shape[0], stride, pads, dilation, out_lanes=lanes if y_blocked else 0)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    ref = conv64(x, w, b, stride, pads, dilation)
    ref = block64(ref, lanes) if y_blocked else ref
    assert ref.shape == tuple(y.shape)
    template = CpuDirectConv2d()
    args = [xin, _packed(w, ob)] + ([b] if bias else [])
    for params in template.space(target, 1):
        compiled = compile_scheduled(task, template.build(task, attributes, params, target), cpu_backend, target)
        out = np.full(ref.shape, np.nan, np.float32)
        compiled.run(args, [out])
        _check(out, ref, f"{case} {isa} {params}")


@pytest.mark.parametrize("size,in_row", [(56, True), (28, True), (7, False)])
def test_flat_tiles_inside_rows_read_x_at_constant_offsets(size, in_row):
    """Where every flat tile lies inside one image row (14-pixel tiles at 56x56 and
    28x28), the micro-kernel divides the tile's first pixel by W once; tiles across rows
    (7x7: 13 + 12 + 12 + 12) unravel each pixel."""
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    target = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512, "l1d_bytes": 32 << 10, "l2_bytes": 1 << 20})
    packed = cpu_conv.pack_conv_weight(hf.symbol((64, 32, 1, 1), "float32"), 32)
    y = cpu_conv.conv2d_packed(hf.symbol((1, 2, size, size, 16), "float32"), packed, None, 64, (1, 1), (0,) * 4,
                               (1, 1), out_lanes=16)
    template = CpuDirectConv2d()
    module = template.build(y.producer.task, dict(y.producer.attributes), template.space(target, 0)[0], target).module
    source = generate(lower(module, "cpu"), target)
    tile = source.split("/* hidet function: conv2d_cpu_direct_flat")[1].split("/* hidet function")[0]
    assert (tile.count(f"/ {size}") == 1) == in_row, tile.count(f"/ {size}")


def test_blocked_shapes_are_refused():
    x = hf.symbol((1, 20, 5, 5), "float32")
    with pytest.raises(hf.ShapeError if hasattr(hf, "ShapeError") else Exception, match="does not hold"):
        cpu_blocked.from_blocked(cpu_blocked.to_blocked(x, 16), 33)
    packed = cpu_conv.pack_conv_weight(hf.symbol((24, 20, 1, 1), "float32"), 32)
    with pytest.raises(Exception, match="whole 16-lane vectors|not whole"):
        cpu_conv.conv2d_packed(x, cpu_conv.pack_conv_weight(hf.symbol((24, 20, 1, 1), "float32"), 24), None, 24,
                               (1, 1), (0,) * 4, (1, 1), out_lanes=16)
    with pytest.raises(Exception, match="does not hold"):   # blocked x of 16 channels, weights over 20
        cpu_conv.conv2d_packed(hf.symbol((1, 1, 5, 5, 16), "float32"), packed, None, 24, (1, 1), (0,) * 4, (1, 1))


@pytest.mark.parametrize("channels,lanes", [(20, 16), (7, 8), (32, 16), (3, 4)])
def test_layout_operators_against_numpy(rng, channels, lanes):
    a = rng.standard_normal((2, channels, 5, 3)).astype(np.float32)
    w = rng.standard_normal((channels, 1, 3, 2)).astype(np.float32)
    x = hf.symbol(a.shape, "float32")
    xb = cpu_blocked.to_blocked(x, lanes)
    back = cpu_blocked.from_blocked(hf.ops.relu(xb), channels)
    wp = cpu_blocked.blocked_pack(hf.constant(w), lanes)
    fn = hf.compile(hf.trace([xb, back, wp + 0.0], [x]), target="cpu", space=0)
    got_b, got_back, got_w = fn(a)
    assert np.array_equal(got_b, block64(a, lanes))
    assert np.array_equal(got_back, np.maximum(a, 0.0))
    assert np.array_equal(got_w, block64(w.reshape(1, channels, 3, 2), lanes)[0])
