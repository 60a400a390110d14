"""The CPU direct convolution: the ``conv2d_pack_weights`` rewrite (weights packed once,
by constant folding) and the ``ops.conv2d_cpu_direct`` template of ``conv2d_packed``.

Every candidate runs on fresh random inputs with a poisoned (NaN) output, at odd and
prime sizes, strides, asymmetric pads, dilations, windows that reach past the image
(rows and columns made of padding only), output channels that do not fill the last
block, against a float64 numpy reference; on this machine's ISA and on AVX2 (the
target says 256-bit vectors and gcc is told ``-mno-avx512f``). The rule is checked to
fire only where it should, the compiled graph to keep the packed weights as a
constant, and bias + residual + relu to fuse onto the template's stores.
"""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_ops import cpu_conv
from hidet_plugin_ops.cpu_conv_template import CpuDirectConv2d, column_tiles, conv_space, max_pixels

from .conv_packing import _packed, _task
from .cpu_candidates import ISAS, isa_target

TEMPLATE = CpuDirectConv2d()



def conv64(x, w, b, stride, pads, dilation):
    """float64 reference: zero-pad (top, left, bottom, right), dilated windows, tensordot."""
    (sh, sw), (dh, dw) = stride, dilation
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    o, c, kh, kw = w.shape
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((x.shape[0], o, oh, ow))
    for r in range(kh):
        for q in range(kw):
            patch = xp[:, :, r * dh: r * dh + sh * (oh - 1) + 1: sh, q * dw: q * dw + sw * (ow - 1) + 1: sw]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, r, q].astype(np.float64))
    return y + (b.astype(np.float64)[None, :, None, None] if b is not None else 0.0)


CASES = [  # x shape, w shape, stride, pads (top, left, bottom, right), dilation, bias
    ((1, 3, 11, 13), (7, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),
    ((2, 5, 17, 19), (33, 5, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),
    ((1, 1, 23, 29), (16, 1, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), False),
    ((1, 13, 7, 7), (41, 13, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True),
    ((1, 6, 9, 31), (5, 6, 3, 2), (1, 3), (2, 0, 1, 3), (2, 1), True),
    ((1, 4, 5, 5), (3, 4, 3, 3), (1, 1), (4, 4, 4, 4), (1, 1), True),      # rows/columns of padding only
    ((1, 2, 37, 3), (2, 2, 5, 3), (3, 1), (2, 1, 2, 1), (1, 2), False),
    ((1, 8, 29, 1), (17, 8, 3, 1), (1, 1), (1, 0, 1, 0), (1, 1), True),     # one output column
    ((3, 7, 14, 14), (64, 7, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), True),
    ((2, 5, 13, 17), (37, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True),    # pointwise, partial last tile
    ((1, 3, 8, 12), (16, 3, 1, 1), (1, 1), (0, 0, 0, 0), (3, 2), False),    # pointwise, whole tiles
    ((2, 19, 7, 7), (67, 19, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True),    # flat: tiles across rows
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_candidates_against_float64(cpu_backend, rng, case, isa, monkeypatch):
    x_shape, w_shape, stride, pads, dilation, bias = case
    target = isa_target(cpu_backend, isa, monkeypatch)
    ob = cpu_conv.block_width(target, w_shape[0])
    task, attributes, y_shape = _task(x_shape, w_shape, ob, bias, stride, pads, dilation)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    ref = conv64(x, w, b, stride, pads, dilation)
    assert ref.shape == y_shape
    space = conv_space(target, 1, ob)
    pixels = dict(space[0], form="pixels")     # the default with 32 registers, a candidate with 16
    assert pixels in space
    picks = [pixels, dict(pixels, order="block", schedule="static"), dict(pixels, form="direct", owb=1),
             dict(pixels, form="direct", owb=3, order="block", schedule="static")]
    for params in picks:
        scheduled = TEMPLATE.build(task, attributes, params, target)
        compiled = compile_scheduled(task, scheduled, cpu_backend, target)
        y = np.full(y_shape, np.nan, np.float32)
        inputs = [x, _packed(w, ob)] + ([b] if bias else [])
        compiled.run(inputs, [y])
        assert not np.isnan(y).any(), f"{params}: an output element was never written"
        err = np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30)
        assert err < 1e-5, f"{case} {isa} {params}: relative error {err:.3g}"


def test_space_and_blocks_come_from_the_machine():
    base = {"cores": 2, "l1d_bytes": 32768, "l2_bytes": 1 << 20}
    avx512 = Target("cpu", "x86-64", {**base, "vector_bits": 512})
    avx2 = Target("cpu", "x86-64", {**base, "vector_bits": 256})
    assert cpu_conv.block_width(avx512, 64) == 32 and cpu_conv.block_width(avx2, 64) == 16
    assert cpu_conv.block_width(avx512, 3) == 16 and cpu_conv.block_width(avx2, 9) == 16
    # 32 registers: 14 pixels x 2 vectors (+ 2 weight vectors + a broadcast); 16: 6 x 2
    assert max_pixels(avx512, 32) == 14 and max_pixels(avx2, 16) == 6
    for target in (avx512, avx2):
        ob = 2 * cpu_conv.target_lanes(target)
        lvl0, lvl1 = conv_space(target, 0, ob), conv_space(target, 1, ob)
        assert len(lvl0) == 1 and lvl1[0] == lvl0[0] and 1 < len(lvl1) <= 30
        assert len({tuple(sorted(c.items())) for c in lvl1}) == len(lvl1)
        # the pointwise form is the default with 32 registers only; both forms are candidates
        assert lvl0[0]["form"] == ("pixels" if target is avx512 else "direct")
        assert {c["form"] for c in lvl1} == {"pixels", "direct"}
        assert {c["order"] for c in lvl1 if c["form"] == "pixels"} == {"row", "block"}


@pytest.mark.parametrize("x_shape,stride,pixels", [
    ((1, 8, 56, 56), (1, 1), True), ((2, 8, 13, 17), (1, 1), True), ((1, 8, 14, 14), (1, 1), True),
    ((1, 8, 7, 7), (1, 1), False),       # 49 pixels would compute 64: the direct form
    ((1, 8, 56, 56), (2, 2), False)])
def test_pointwise_form_where_it_pays(x_shape, stride, pixels):
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    target = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512})
    task, attributes, _ = _task(x_shape, (64, 8, 1, 1), 32, True, stride, (0, 0, 0, 0), (1, 1))
    module = TEMPLATE.build(task, attributes, conv_space(target, 0, 32)[0], target).module
    assert ("conv2d_cpu_direct_pixels" in generate(lower(module, "cpu"), target)) == pixels


@pytest.mark.parametrize("x_shape,stride,pads,flat", [
    ((1, 8, 7, 7), (1, 1), (0, 0, 0, 0), True),        # 4 tiles over 49 pixels against 7 row tiles
    ((2, 8, 5, 9), (1, 1), (0, 0, 0, 0), True),
    ((1, 8, 56, 56), (1, 1), (0, 0, 0, 0), False),     # rows of 4 whole tiles: nothing to gain
    ((1, 8, 7, 7), (2, 2), (0, 0, 0, 0), False),       # strided: pixels are not contiguous
    ((1, 8, 7, 7), (1, 1), (1, 0, 0, 1), False)])      # padded
def test_flat_form_where_it_pays(x_shape, stride, pads, flat):
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    target = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512})
    task, attributes, _ = _task(x_shape, (64, 8, 1, 1), 32, True, stride, pads, (1, 1))
    params = dict(conv_space(target, 0, 32)[0], form="direct")
    module = TEMPLATE.build(task, attributes, params, target).module
    assert ("conv2d_cpu_direct_flat" in generate(lower(module, "cpu"), target)) == flat


@pytest.mark.parametrize("size,stride,blocked", [
    (56, 1, True),      # 14 pixels: 28 accumulators + 16 shared input values do not fit 32 registers
    (7, 1, False),      # 7 pixels: 14 + 9 (+ 2 weight vectors) fit: taps innermost, one pass
    (14, 2, False)])    # 7 pixels at stride 2: 14 + 15 + 2
def test_tap_order_from_the_register_file(size, stride, blocked):
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    target = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512, "l1d_bytes": 32 << 10})
    task, attributes, _ = _task((1, 64, size, size), (64, 64, 3, 3), 32, True, (stride, stride), (1, 1, 1, 1),
                                (1, 1))
    params = dict(conv_space(target, 0, 32)[0], form="direct")
    source = generate(lower(TEMPLATE.build(task, attributes, params, target).module, "cpu"), target)
    assert ("cbi" in source) == blocked


@pytest.mark.parametrize("ow,owb", [(56, 14), (7, 14), (112, 6), (13, 5), (1, 14), (29, 1)])
def test_column_tiles_cover_the_row_once(ow, owb):
    tiles = column_tiles(ow, owb)
    covered = [c for start, width in tiles for c in range(start, start + width)]
    assert covered == list(range(ow))
    widths = [width for _, width in tiles]
    assert max(widths) <= owb and max(widths) - min(widths) <= 1


def _conv_graph(rng, x_shape, w_shape, stride=1, padding=1, residual=False, groups=1):
    x = hf.symbol(x_shape, "float32")
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    y = hf.ops.conv2d(x, hf.constant(w), hf.constant(b), stride=stride, padding=padding, groups=groups)
    inputs = [x]
    if residual:
        r = hf.symbol(tuple(y.shape), "float32")
        y = hf.ops.relu(hf.ops.add(y, r))
        inputs.append(r)
    return hf.trace(y, inputs=inputs), w, b


def test_compiled_graph_packs_once_and_fuses(rng):
    graph, w, b = _conv_graph(rng, (2, 9, 15, 15), (35, 9, 3, 3), stride=2, residual=True)
    fn = hf.compile(graph, target="cpu", space=0)
    sources = [t.scheduled.source for t in fn.tasks]
    assert sources == ["ops.conv2d_cpu_direct"], sources   # no packing task left to run per call
    assert fn.num_launches == 1
    report = [str(row) for row in fn.fusion_report()]
    assert any("conv2d_packed" in r and "relu" in r and "fused" in r for r in report), report
    for _ in range(2):   # fresh inputs each call
        x = rng.standard_normal((2, 9, 15, 15)).astype(np.float32)
        r = rng.standard_normal((2, 35, 8, 8)).astype(np.float32)
        ref = np.maximum(conv64(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1)) + r, 0)
        got = fn(x, r)
        assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-5


def test_rule_declines_where_it_does_not_apply(rng):
    x = hf.symbol((1, 8, 6, 6), "float32")
    w = hf.constant(rng.standard_normal((8, 4, 3, 3)).astype(np.float32))
    assert cpu_conv.pack_conv2d_weights(hf.ops.conv2d(x, w, groups=2).producer) is None           # grouped
    dw = hf.constant(rng.standard_normal((8, 1, 3, 3)).astype(np.float32))
    assert cpu_conv.pack_conv2d_weights(hf.ops.conv2d(x, dw, groups=8).producer) is None          # depthwise
    w_in = hf.symbol((4, 8, 3, 3), "float32")
    assert cpu_conv.pack_conv2d_weights(hf.ops.conv2d(x, w_in).producer) is None                 # not constant
    x16 = hf.symbol((1, 8, 6, 6), "float16")
    w16 = hf.constant(rng.standard_normal((4, 8, 3, 3)).astype(np.float16))
    assert cpu_conv.pack_conv2d_weights(hf.ops.conv2d(x16, w16).producer) is None                # not float32
    assert cpu_conv.pack_conv2d_weights(hf.ops.relu(x).producer) is None
    # weights computed from constants (batch norm folded into them) are packed
    scaled = hf.ops.mul(hf.constant(rng.standard_normal((4, 8, 3, 3)).astype(np.float32)),
                        hf.constant(np.float32(0.5)))
    assert cpu_conv.pack_conv2d_weights(hf.ops.conv2d(x, scaled).producer) is not None


def test_rule_runs_for_the_cpu_target_only(rng):
    graph, _, _ = _conv_graph(rng, (1, 4, 8, 8), (6, 4, 3, 3))
    names = {}
    for target in ("cpu", "cuda", None):
        ctx = GraphPassContext(target=target, rewrite_rules=[cpu_conv.PACK_RULE])
        names[target] = [op.name for op in rewrite_patterns(graph, ctx).nodes]
    assert cpu_conv.PACKED_OPERATOR in names["cpu"] and cpu_conv.PACK_OPERATOR in names["cpu"]
    assert names["cuda"] == names[None] == ["conv2d"]


@pytest.mark.parametrize("groups,w_shape", [(2, (6, 2, 3, 3)), (4, (4, 1, 3, 3))], ids=["grouped", "depthwise"])
def test_grouped_convolutions_keep_their_paths(rng, groups, w_shape):
    c = w_shape[1] * groups
    graph, w, b = _conv_graph(rng, (1, c, 7, 9), w_shape, groups=groups)
    fn = hf.compile(graph, target="cpu", space=0)
    assert "ops.conv2d_cpu_direct" not in [t.scheduled.source for t in fn.tasks]
    x = rng.standard_normal((1, c, 7, 9)).astype(np.float32)
    cig, cog = w_shape[1], w_shape[0] // groups
    ref = np.concatenate([conv64(x[:, g * cig:(g + 1) * cig], w[g * cog:(g + 1) * cog], b[g * cog:(g + 1) * cog],
                                 (1, 1), (1, 1, 1, 1), (1, 1)) for g in range(groups)], axis=1)
    assert np.abs(fn(x) - ref).max() / np.abs(ref).max() < 1e-5


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_source_size_does_not_grow_with_the_image(isa):
    """Interior column tiles run as a loop: a 4001-wide row prints about the C of a
    57-wide one (286 column tiles unrolled would print each tile's store loop)."""
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    base = {"cores": 2, "l1d_bytes": 32 << 10, "l2_bytes": 1 << 20, "l3_bytes": 32 << 20, "fma": True}
    target = Target("cpu", "x86-64", {**base, "vector_bits": 512 if isa == "avx512" else 256})
    ob = cpu_conv.block_width(target, 40)
    sizes = {}
    for width in (57, 4001):
        task, attributes, _ = _task((1, 3, 5, width), (40, 3, 3, 3), ob, True, (1, 1), (1, 1, 1, 1), (1, 1))
        params = conv_space(target, 0, ob)[0]
        module = TEMPLATE.build(task, attributes, params, target).module
        sizes[width] = len(generate(lower(module, "cpu"), target))
    # at most four micro-kernels (left border, two interior widths, right border) in both
    assert sizes[4001] <= 1.5 * sizes[57], sizes


def test_items_are_handed_out_as_the_candidate_says(monkeypatch):
    """``parallel(n, schedule=...)``: OpenMP's dynamic or static schedule in the C where
    parallel loops print as OpenMP (the thread pool claims chunks dynamically anyway)."""
    monkeypatch.setenv("HIDET_FRAMEWORK_CPU_PARALLEL", "openmp")
    from hidet_framework.lang import parallel
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    target = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512})
    task, attributes, _ = _task((1, 16, 40, 40), (64, 16, 3, 3), 16, True, (1, 1), (1, 1, 1, 1), (1, 1))
    for schedule in ("dynamic", "static"):
        params = dict(conv_space(target, 0, 16)[0], schedule=schedule)
        source = generate(lower(TEMPLATE.build(task, attributes, params, target).module, "cpu"), target)
        assert f"#pragma omp parallel for schedule({schedule})" in source
    with pytest.raises(ValueError, match="schedule"):
        parallel(4, schedule="guided")
    # the pool (default) sees the micro-kernel's work through the call: not serial
    monkeypatch.setenv("HIDET_FRAMEWORK_CPU_PARALLEL", "pool")
    source = generate(lower(TEMPLATE.build(task, attributes, conv_space(target, 0, 16)[0], target).module, "cpu"),
                      target)
    assert "hidet_parallel_for(conv2d_cpu_direct" in source


@pytest.mark.parametrize("case", [
    ((1, 13, 9, 11), (19, 13, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 11, 17, 23), (37, 11, 5, 3), (2, 1), (2, 0, 1, 2), (1, 2)),     # strided, dilated, uneven padding
], ids=str)
def test_channel_blocks_from_a_small_l1(cpu_backend, rng, case):
    """The micro-kernel walks the input channels in blocks that fit half of L1 (read
    from the target); with a small L1 a block is a few channels and the last one is
    shorter: every channel is still summed once (float64 reference, poisoned output)."""
    from hidet_plugin_ops.cpu_conv_template import channel_block

    x_shape, w_shape, stride, pads, dilation = case
    native = cpu_backend.detect_target()
    c = w_shape[1]
    ob = cpu_conv.block_width(native, w_shape[0])
    task, attributes, y_shape = _task(x_shape, w_shape, ob, True, stride, pads, dilation)
    params = dict(conv_space(native, 0, ob)[0], form="direct")
    widths = {width for _, width in column_tiles(y_shape[3], params["owb"])}

    def blocks(l1d):
        geo = {"c": c, "kh": w_shape[2], "kw": w_shape[3], "sw": stride[1], "dw": dilation[1], "l1d": l1d}
        return {channel_block(geo, width, ob) for width in widths}

    # the smallest L1 at which every tile width takes several blocks, the last one shorter
    l1d = next(size for size in range(1024, 1 << 16, 256) if all(1 < cb < c and c % cb for cb in blocks(size)))
    assert blocks(64 << 10) == {c}                  # a large L1: one block
    target = Target("cpu", native.arch, {**native.properties, "l1d_bytes": l1d})
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    ref = conv64(x, w, b, stride, pads, dilation)
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    scheduled = TEMPLATE.build(task, attributes, params, target)
    assert "cbi" in generate(lower(scheduled.module, "cpu"), target)       # the blocked order was built
    compiled = compile_scheduled(task, scheduled, cpu_backend, target)
    y = np.full(y_shape, np.nan, np.float32)
    compiled.run([x, _packed(w, ob), b], [y])
    assert not np.isnan(y).any()
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-5

