"""The direct convolution's weight prefetch (cpu_conv_template.py, `next_block_lines`):
with ``order="row"`` and the kernel-column passes, each output row of weight block b
prefetches its share of block b + 1 while it computes.

The generated kernel itself is checked: built with ``__builtin_prefetch`` turned into
a call that records the address, then run (NaN-poisoned output, float64 reference), so
the test sees every line the kernel asks for. Every line of blocks 1 .. B-1 must be
asked for exactly once (rows with several column tiles: only the first tile asks),
none of block 0 and nothing outside the weights; on this machine's ISA and on AVX2
(16 registers, 8 lanes). The flat form on channel-blocked x likewise: each tile
its share of the next block (pixels [p0, p1) of P: lines [p0 * L / P, p1 * L / P)).
Where the weights are read in order (taps innermost, NCHW 1x1 kernels, 7-pixel
tiles), with ``order="block"``, where two blocks do not fit the L2, or (flat) where a
block has fewer lines than the image has tiles, nothing is prefetched.
"""
from __future__ import annotations

import ctypes
from collections import Counter

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_ops import cpu_blocked, cpu_conv
from hidet_plugin_ops.cpu_conv_plan import LINE_FLOATS, next_block_lines
from hidet_plugin_ops.cpu_conv_template import CpuDirectConv2d, conv_space

from .conv_packing import _packed, _task
from .test_cpu_blocked import block64
from .test_cpu_conv import conv64

TEMPLATE = CpuDirectConv2d()

RECORDER = """
static const char* hidet_test_seen[1 << 16];
static int hidet_test_count;
static void hidet_test_record(const void* p, int rw, int locality) {
    (void)rw; (void)locality;
    int k = __atomic_fetch_add(&hidet_test_count, 1, __ATOMIC_RELAXED);
    if (k < (1 << 16)) hidet_test_seen[k] = (const char*)p;
}
HIDET_EXPORT int hidet_test_seen_count(void) { return hidet_test_count; }
HIDET_EXPORT const char* hidet_test_seen_at(int k) { return hidet_test_seen[k]; }
"""


def _target(native, isa, l2_bytes=1 << 20):
    bits = 256 if isa == "avx2" else int(native.get("vector_bits", 256))
    return Target("cpu", native.arch, {**native.properties, "vector_bits": bits, "l2_bytes": l2_bytes})


def _blocked_task(x_shape, w_shape, ob, lanes, y_blocked):
    """conv2d_packed reading x channel-blocked (rank 5), y blocked or NCHW."""
    n, c, h, w = x_shape
    x = hf.symbol((n, -(-c // lanes), h, w, lanes), "float32")
    packed = cpu_conv.pack_conv_weight(hf.symbol(w_shape, "float32"), ob)
    y = cpu_conv.conv2d_packed(x, packed, hf.symbol((w_shape[0],), "float32"), w_shape[0], (1, 1), (0,) * 4, (1, 1),
                               out_lanes=lanes if y_blocked else 0)
    return y.producer.task, dict(y.producer.attributes), tuple(y.shape)


def _source(target, x_shape, w_shape, stride, pads, params=None, blocked=None):
    """`blocked`: None (NCHW x), or whether y is blocked too (x channel-blocked)."""
    from hidet_plugin_cpu.codegen import generate

    ob = cpu_conv.block_width(target, w_shape[0])
    if blocked is None:
        task, attributes, y_shape = _task(x_shape, w_shape, ob, True, stride, pads, (1, 1))
    else:
        task, attributes, y_shape = _blocked_task(x_shape, w_shape, ob, cpu_blocked.blocked_lanes(target), blocked)
    params = params or dict(conv_space(target, 0, ob)[0], form="direct")
    source = generate(lower(TEMPLATE.build(task, attributes, params, target).module, "cpu"), target)
    return source, ob, y_shape


def _run_recorded(cpu_backend, rng, isa, x_shape, w_shape, stride, pads, blocked=None):
    """(prefetched line numbers relative to the packed weights, lines per block, blocks)."""
    from hidet_plugin_cpu.build import build_shared_library

    native = cpu_backend.detect_target()
    if isa == "native" and int(native.get("vector_bits", 256)) < 512:
        pytest.skip("the native case is the AVX-512 register file")
    target = _target(native, isa)
    source, ob, y_shape = _source(target, x_shape, w_shape, stride, pads, blocked=blocked)
    assert "__builtin_prefetch" in source
    anchor = "#define HIDET_EXPORT __attribute__((visibility(\"default\")))\n"
    assert anchor in source
    source = source.replace(anchor, anchor + RECORDER).replace("__builtin_prefetch(", "hidet_test_record(")
    path, _ = build_shared_library(source, name="prefetch_recorded",
                                   extra_flags=("-mno-avx512f",) if isa == "avx2" else ())
    lib = ctypes.CDLL(path)
    lib.hidet_test_seen_at.restype = ctypes.c_void_p
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    wp = _packed(w, ob)
    y = np.full(y_shape, np.nan, np.float32)
    lanes = cpu_blocked.blocked_lanes(target)
    xin = x if blocked is None else block64(x, lanes)
    lib.conv2d_cpu_direct(*[a.ctypes.data_as(ctypes.c_void_p) for a in (xin, wp, b, y)])
    assert not np.isnan(y).any(), "an output element was never written"
    ref = conv64(x, w, b, stride, pads, (1, 1))
    ref = block64(ref, lanes) if blocked else ref
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-5
    base = wp.ctypes.data
    offsets = [lib.hidet_test_seen_at(k) - base for k in range(lib.hidet_test_seen_count())]
    assert all(o % (LINE_FLOATS * 4) == 0 for o in offsets), "a prefetch not at a line of the packed weights"
    block_lines = wp[0].size // LINE_FLOATS
    return [o // (LINE_FLOATS * 4) for o in offsets], block_lines, wp.shape[0]


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("x_shape,w_shape,stride,pads", [
    ((1, 20, 11, 14), (96, 20, 3, 3), (1, 1), (1, 1, 1, 1)),     # one column tile a row, 3 blocks
    ((1, 7, 9, 31), (80, 7, 3, 3), (1, 1), (1, 1, 1, 1)),        # several tiles a row; ragged last block
    ((2, 13, 23, 29), (70, 13, 3, 3), (2, 2), (0, 1, 2, 1)),     # stride 2, two images, asymmetric pads
    ((1, 3, 17, 19), (40, 3, 5, 5), (1, 1), (2, 2, 2, 2)),       # fewer channels than lines a row
])
def test_each_line_of_the_next_blocks_prefetched_once(cpu_backend, rng, isa, x_shape, w_shape, stride, pads):
    lines, block_lines, blocks = _run_recorded(cpu_backend, rng, isa, x_shape, w_shape, stride, pads)
    assert blocks > 1
    seen = Counter(lines)
    want = Counter({line: x_shape[0] for line in range(block_lines, blocks * block_lines)})  # once per image
    assert seen == want, (f"missing {sorted(set(want) - set(seen))[:8]}, outside {sorted(set(seen) - set(want))[:8]},"
                          f" repeated {[k for k, v in seen.items() if v > want.get(k, 0)][:8]}")


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("x_shape,w_shape,y_blocked", [
    ((1, 20, 7, 7), (96, 20, 1, 1), True),       # flat tiles across rows, 3 blocks
    ((2, 37, 9, 11), (70, 37, 1, 1), False),     # two images, ragged last block, NCHW y
])
def test_flat_blocked_tiles_prefetch_the_next_block_once(cpu_backend, rng, isa, x_shape, w_shape, y_blocked):
    lines, block_lines, blocks = _run_recorded(cpu_backend, rng, isa, x_shape, w_shape, (1, 1), (0,) * 4, y_blocked)
    seen = Counter(lines)
    want = Counter({line: x_shape[0] for line in range(block_lines, blocks * block_lines)})
    assert seen == want, (f"missing {sorted(set(want) - set(seen))[:8]}, outside {sorted(set(seen) - set(want))[:8]},"
                          f" repeated {[k for k, v in seen.items() if v > want.get(k, 0)][:8]}")


def test_flat_blocked_no_prefetch_below_a_line_a_tile():
    # 64 -> 256 at 56x56: a block is 128 lines, the image 224 tiles; 256 -> 64: 512 lines
    target = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512, "l1d_bytes": 32 << 10, "l2_bytes": 1 << 20})
    assert "__builtin_prefetch" not in _source(target, (1, 64, 56, 56), (256, 64, 1, 1), (1, 1), (0,) * 4,
                                               blocked=True)[0]
    assert "__builtin_prefetch" in _source(target, (1, 256, 56, 56), (64, 256, 1, 1), (1, 1), (0,) * 4,
                                           blocked=True)[0]
    block_order = dict(conv_space(target, 0, 32)[0], order="block")    # no next block to fetch
    assert "__builtin_prefetch" not in _source(target, (1, 256, 56, 56), (64, 256, 1, 1), (1, 1), (0,) * 4,
                                               block_order, blocked=True)[0]


@pytest.mark.parametrize("w_shape,size,params,l2_bytes", [
    ((64, 64, 1, 1), 28, {}, 1 << 20),                   # 1x1: weights read in order
    ((64, 64, 3, 3), 7, {}, 1 << 20),                    # 7-pixel tiles: taps innermost, one pass
    ((64, 64, 3, 3), 28, {"order": "block"}, 1 << 20),   # blocks innermost: no next block to fetch
    ((64, 256, 3, 3), 28, {}, 512 << 10),                # 2 blocks of 288 KiB do not fit a 512 KiB L2
    ((32, 64, 3, 3), 28, {}, 1 << 20),                   # one block
])
def test_no_prefetch_where_it_does_not_serve(cpu_backend, w_shape, size, params, l2_bytes):
    target = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512, "l1d_bytes": 32 << 10, "l2_bytes": l2_bytes})
    ob = cpu_conv.block_width(target, w_shape[0])
    source, _, _ = _source(target, (1, w_shape[1], size, size), w_shape, (1, 1), (1, 1, 1, 1),
                           dict(conv_space(target, 0, ob)[0], form="direct", **params))
    assert "__builtin_prefetch" not in source
    if not params and l2_bytes == 512 << 10:     # the same shape with a 1 MiB L2 does prefetch
        bigger = Target("cpu", "x86-64", {**target.properties, "l2_bytes": 1 << 20})
        assert "__builtin_prefetch" in _source(bigger, (1, w_shape[1], size, size), w_shape, (1, 1),
                                               (1, 1, 1, 1))[0]


def test_next_block_lines():
    # 256 channels x 3 x 3 x 32 floats = 288 KiB = 4608 lines over 14 rows: 330 a row
    assert next_block_lines((8, 256, 3, 3, 32), 14, 1 << 20) == 330
    assert next_block_lines((8, 256, 3, 3, 32), 14, 512 << 10) == 0      # two blocks: 576 KiB
    assert next_block_lines((1, 256, 3, 3, 32), 14, 1 << 20) == 0        # no next block
    assert next_block_lines((4, 3, 3, 3, 16), 100, 1 << 20) == 1         # 27 lines: at least one a row
    for shape, parts in [((3, 7, 3, 3, 32), 11), ((5, 13, 5, 5, 16), 23), ((2, 20, 1, 1, 32), 3)]:
        per = next_block_lines(shape, parts, 1 << 20)
        block_lines = -(-shape[1] * shape[2] * shape[3] * shape[4] // LINE_FLOATS)
        assert per * parts >= block_lines > (per - 1) * parts      # ceil(block_lines / parts)
