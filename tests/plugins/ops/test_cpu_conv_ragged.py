"""``ops.conv2d_cpu_direct`` where O does not fill the last weight block: that block runs
its own micro-kernels over only the vectors (direct and flat forms) or the sub-blocks of
mr channels (pointwise form) that hold output channels (`last_block_vectors`,
Inception-V3's 64->80: 32 + 32 + 16 channels with AVX-512, one of two vectors in the
last block).

Every candidate of the space runs on fresh random inputs with a NaN-poisoned output
against a float64 numpy reference, NCHW and channel-blocked x and y, on this machine's
ISA and on AVX2 (256-bit vectors, gcc told ``-mno-avx512f``), at odd and prime sizes;
the generated source is checked to hold the narrow kernels where O is ragged, and none
where O fills its blocks.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_framework.transforms.pipeline import lower
from hidet_plugin_ops import cpu_blocked, cpu_conv
from hidet_plugin_ops.cpu_conv_pointwise import pointwise_tile
from hidet_plugin_ops.cpu_conv_template import CpuDirectConv2d, last_block_vectors

from .conv_packing import _packed
from .cpu_candidates import isa_target
from .test_cpu_blocked import _check, block64
from .test_cpu_conv import conv64

TEMPLATE = CpuDirectConv2d()

CASES = [  # x shape, O, kernel, stride, pads, x blocked, y blocked
    ((1, 13, 23, 29), 37, 3, 1, (1, 1, 1, 1), False, False),   # direct 3x3: 37 = 32 + 5 (16 + 16 + 5 on AVX2)
    ((1, 16, 17, 19), 40, 3, 2, (0, 1, 1, 0), True, False),    # direct, blocked x, stride 2, asymmetric pads
    ((1, 7, 13, 11), 80, 1, 1, (0, 0, 0, 0), False, True),     # Inception's 64->80 form: flat, blocked y
    ((1, 16, 7, 7), 40, 1, 1, (0, 0, 0, 0), True, True),       # flat, blocked both ways
    ((2, 19, 13, 11), 170, 1, 1, (0, 0, 0, 0), False, False),  # pointwise: 170 = 5 x 32 + 10, a partial pixel tile
    ((1, 5, 12, 12), 41, 1, 1, (0, 0, 0, 0), False, False),    # pointwise, whole pixel tiles
]


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_ragged_last_block_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, o, k, s, pads, x_blocked, y_blocked = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    lanes = cpu_blocked.blocked_lanes(target)
    ob = cpu_conv.block_width(target, o)
    # ragged on both ISAs but the 80 (AVX2's 16-channel blocks: 5 whole ones, a control)
    assert bool(o % ob) == (o != 80 or lanes > 8)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((o, c, k, k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    xin = block64(x, lanes) if x_blocked else x
    y = cpu_conv.conv2d_packed(hf.symbol(xin.shape, "float32"), cpu_conv.pack_conv_weight(hf.symbol(w.shape, "float32"), ob),
                               hf.symbol(b.shape, "float32"), o, (s, s), pads, (1, 1), out_lanes=lanes if y_blocked else 0)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    ref = conv64(x, w, b, (s, s), pads, (1, 1))
    ref = block64(ref, lanes) if y_blocked else ref
    assert ref.shape == tuple(y.shape)
    args = [xin, _packed(w, ob), b]
    for params in TEMPLATE.space(target, 1):
        compiled = compile_scheduled(task, TEMPLATE.build(task, attributes, params, target), cpu_backend, target)
        out = np.full(ref.shape, np.nan, np.float32)
        compiled.run(args, [out])
        _check(out, ref, f"{case} {isa} {params}")


def test_last_block_vectors():
    assert last_block_vectors(80, 32, 16) == 1 and last_block_vectors(96, 32, 16) == 2
    assert last_block_vectors(176, 32, 16) == 1 and last_block_vectors(37, 32, 16) == 1
    assert last_block_vectors(57, 32, 16) == 2 and last_block_vectors(40, 16, 8) == 1
    assert last_block_vectors(45, 16, 8) == 2 and last_block_vectors(7, 16, 16) == 1
    assert last_block_vectors(37, 37, 1) == 37          # scalar tiles keep the block


def _source(target, x_shape, o, k, y_lanes, params):
    from hidet_framework.extension import plugin_host

    backend = plugin_host().backend_for("cpu")
    ob = cpu_conv.block_width(target, o)
    y = cpu_conv.conv2d_packed(hf.symbol(x_shape, "float32"),
                               cpu_conv.pack_conv_weight(hf.symbol((o, x_shape[1], k, k), "float32"), ob),
                               None, o, (1, 1), (k // 2,) * 4, (1, 1), out_lanes=y_lanes)
    scheduled = TEMPLATE.build(y.producer.task, dict(y.producer.attributes), params, target)
    return backend.codegen(lower(scheduled.module, "cpu"), target)


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_narrow_kernels_only_where_o_is_ragged(cpu_backend, isa, monkeypatch):
    target = isa_target(cpu_backend, isa, monkeypatch)
    lanes = cpu_blocked.blocked_lanes(target)
    ob = 2 * lanes
    first = TEMPLATE.space(target, 0)[0]
    direct = dict(first, form="direct")
    for o, ragged in ((ob + lanes, True), (2 * ob, False)):
        # direct: the last block's tiles declare width x 1 accumulators, the others width x 2
        src = _source(target, (1, 8, 9, 23), o, 3, 0, direct)
        sizes = {int(m) for m in re.findall(r"float32x%d acc\[(\d+)\]" % lanes, src)}
        assert ("_last(" in src) == ragged and (min(sizes) * 2 in sizes) == ragged, (o, sizes)
        # flat (1x1, blocked y)
        src = _source(target, (1, 8, 7, 7), o, 1, lanes, first)
        assert ("_last(" in src) == ragged
        # pointwise: the last block runs half its sub-blocks of mr channels
        src = _source(target, (1, 8, 12, 12), o, 1, 0, dict(first, form="pixels"))
        assert ("_pixels_lastblock(" in src) == ragged
        if ragged:
            mr = pointwise_tile(32 if lanes == 16 else 16, ob)[0]
            body = re.search(r"void \w+_pixels_lastblock\([^)]*\) \{(.*?)\n\}\n", src, re.S).group(1)
            assert body.count("wp[") == (ob // 2 // mr) * mr, "the narrow tile reads only its sub-blocks' weights"
