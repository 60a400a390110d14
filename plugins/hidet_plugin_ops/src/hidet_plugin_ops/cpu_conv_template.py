"""The CPU template of ``conv2d_packed``: direct convolution, NCHW activations, weights
packed at compile time into ``[O/ob, C, KH, KW, ob]`` blocks (`cpu_conv.py`).

It is a GEMM whose A operand is read in place: an output row segment of ``width``
pixels times ``ob`` output channels is one register tile (``width x nv`` SIMD
accumulators, ``nv = ob / lanes``), and each step of the reduction over (c, kh, kw)
loads ``nv`` weight vectors (contiguous in the packed block) and broadcasts ``width``
input values x[n, c, ih, iw0 + j*sw + kw*dw] (one or two cache lines of one input
row; no im2col buffer, no packing, no div/mod)::

    parallel over items, handed out one at a time (OpenMP schedule(dynamic)):
        (n, output-channel block, output row) = spatial(...) task mapping of the item
            kh range of the row (rows in the padding skipped: loop bounds)
            for each column tile (static: positions fixed by the shape):
                micro-kernel: width x nv accumulators over c, kh, kw (order below);
                taps that fall into the left/right padding are dropped while tracing
                (the tile's position is static), so there is no check in any loop
                y[n, o, oh, ow] = acc + bias      (element stores: epilogues graft)

Order of the reduction. At stride 1, pixel j at kernel column q reads the value pixel
j + 1 reads at column q - 1: with the columns innermost, gcc loads each input value
once per (c, kh) and keeps ``(width - 1) * sw + (kw - 1) * dw + 1`` of them live beside
the ``width x nv`` accumulators. Where that fits the register file (7-pixel tiles, 1x1
kernels) the columns stay innermost: one pass over the channels. Elsewhere (14-pixel
tiles of 3x3 and 7x7 kernels: 28 accumulators + 16 to 33 values) gcc spilled
accumulators (52 stack accesses per 82 FMAs in the 3x3 loop), so the channels are
walked in blocks whose input rows and weights fit half of L1 (`channel_block`, the L1
size read from the target) and, inside a block, one pass per kernel column: every
loop body broadcasts each value once, and the passes after the first read L1.
1x1 stride-1 unpadded convolutions take the pointwise form where it pays
(`cpu_conv_pointwise.py`), else the flat form where tiles over the flat pixels are
fewer than over the rows (`cpu_conv_flat.py`, 7x7 images).

Columns are cut into ``ceil(OW / owb)`` tiles of balanced widths; tiles of one width
whose taps are all inside share one micro-kernel, and a run of them is one loop (the
code's size does not grow with the image's width). Items walk output rows innermost
(``order="row"``: one weight block stays in L2 while the input streams) or channel
blocks innermost (``order="block"``: the input rows stay in L1/L2 while the weights
stream, for small weights). Items go to whichever thread is free: on a loaded machine
a descheduled thread delays only the row it holds. Space (from the machine only):
``owb`` from the register file, the two orders, dynamic or static shares. Host-side
planning (tiles, channel blocks, the space, the prefetch) is in `cpu_conv_plan.py`.

Weight prefetch. In a model the weights are cold (the other layers' weights evicted
them), and the kernel-column passes read a block's weights kw * ob floats apart, a
pattern the hardware prefetcher does not run ahead of: ResNet-50's 3x3 256@14x14 took
2.31 ms alone with cold weights against 2.03 warm. With ``order="row"`` the rows of one block
run one after another, so in the first pass each row prefetches its share of the next
block (`next_block_lines`: ceil(lines / OH), a few lines a channel, only in the first
column tile of a row; only where two blocks fit the L2). The flat form on blocked x
(1x1: its weights are read in order) has the hardware prefetcher's help within a block
but misses on the first tile of each; its tiles prefetch their share of the next block
too, a few lines a channel (tile [p0, p1) of P pixels: lines [p0 * L / P, p1 * L / P)),
where the share is a line or more: 7x7 512 -> 2048 1117 -> 1060 us. Issuing a share at
once (a burst at the item's start) measured slower than none (1128 -> 1227 us).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.dtypes import float32, vector_type
from hidet_framework.ir.mapping import spatial
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f32, i32, local_tensor, parallel, register_tensor, script, script_module,
    static_range,
)
from hidet_framework.schedule.scheduled_task import Launch, ScheduledTask

from .cpu_conv import PACKED_OPERATOR, target_lanes, vector_registers
from .cpu_conv_flat import build_flat, flat_applies
from .cpu_conv_plan import (
    LINE_FLOATS, channel_block, column_tiles, conv_space, last_block_vectors, max_pixels, next_block_lines, tile_runs,
)
from .cpu_conv_pointwise import build_pointwise, pointwise_applies, prefetch_read
from .cpu_scheduling import CpuFloat32Template, bias_buffers, clip_kernel_rows

__all__ = ["CpuDirectConv2d", "conv_space", "column_tiles", "last_block_vectors", "max_pixels", "channel_block"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _micro_kernel(key: str, vec: Any, lanes: int, nv: int, ob: int, width: int, valid: tuple, geo: dict,
                  x_shape: tuple, wp_shape: tuple, static_rows: bool, flat: bool = False, in_row: bool = False):
    """`flat`: iw0 + j is a flat pixel index of a 1x1 stride-1 convolution (cpu_conv_flat.py).
    A rank-5 `x_shape` is the channel-blocked layout (cpu_blocked.py): channel ci of a
    pixel at [ci / L, ..., ci % L]."""
    vec_ptr = PointerType(vec)
    c, kh, kw, sw, dw, dh, w = (geo[k] for k in ("c", "kh", "kw", "sw", "dw", "dh", "w"))
    bl = x_shape[4] if len(x_shape) == 5 else 0
    cb = channel_block(geo, width, ob)
    # taps innermost (one pass over the channels) where the input values neighbouring
    # taps share fit the registers beside the accumulators: gcc keeps them live there
    span = (width - 1) * sw + (kw - 1) * dw + 1
    taps_inner = kw == 1 or flat or width * nv + nv + span <= geo["registers"]
    # the passes read a tap's weights kw * ob floats apart: the next block's share of
    # this row (`next_block_lines`) is prefetched in the first pass, per_c lines a channel
    pf_lines = 0 if taps_inner else geo.get("pf_lines", 0)
    per_c = _ceil_div(pf_lines, c)
    block_lines = _ceil_div(c * kh * kw * ob, LINE_FLOATS)
    blocks, top, sh = geo.get("blocks", 1), geo.get("top", 0), geo.get("sh", 1)
    fptr = PointerType(float32)
    # flat blocked tiles: the tile of pixels [iw0, iw0 + width) of P prefetches lines
    # [iw0 * L / P, (iw0 + width) * L / P) of the next block (L its lines)
    pixels = geo.get("pf_pixels", 0) if flat and bl else 0
    per_cf = _ceil_div(_ceil_div(block_lines * width, max(1, pixels)) + 1, c)

    @script
    def conv_tile(x: f32[x_shape], wp: f32[wp_shape], tile: f32[width * ob], ni: i32, blk: i32, ih0: i32,
                  iw0: i32, kh_lo: i32, kh_hi: i32):
        attrs.func_kind = "device"
        attrs.func_name = key
        acc = register_tensor(vec, [width, nv])
        wv = register_tensor(vec, [nv])
        for j in static_range(width):
            for v in static_range(nv):
                acc[j, v] = cast(0.0, vec)
        lo = 0 if static_rows else kh_lo       # every row sees every kernel row: constant bounds
        hi = kh if static_rows else kh_hi
        if flat and bl:
            # blocked x: channel block, then lane (no division in the loop); a pixel's
            # channels of one block are one cache line. Where no tile crosses the end of
            # an image row (`in_row`), a tile's pixels are one run of x, read at constant
            # offsets from its first (without it, gcc keeps one offset a pixel)
            if in_row:
                row = iw0 / w
                col = iw0 % w
            if pixels > 0:
                pf_first = iw0 * block_lines / pixels
                pf_count = 0
                nxt = cast(address_of(wp[blk, 0, 0, 0, 0]), fptr)
                if blk + 1 < blocks:
                    pf_count = (iw0 + width) * block_lines / pixels - pf_first
                    nxt = cast(address_of(wp[blk + 1, 0, 0, 0, 0]), fptr)
            for cbk in range(_ceil_div(c, bl)):
                for cl in range(bl if c % bl == 0 else min(bl, c - cbk * bl)):
                    if pixels > 0:
                        for k in static_range(per_cf):
                            if (cbk * bl + cl) * per_cf + k < pf_count:
                                prefetch_read(address_of(nxt[(pf_first + (cbk * bl + cl) * per_cf + k) * LINE_FLOATS]))
                    for v in static_range(nv):
                        wv[v] = deref(cast(address_of(wp[blk, cbk * bl + cl, 0, 0, v * lanes]), vec_ptr))
                    for j in static_range(width):
                        if in_row:
                            xf = x[ni, cbk, row, col + j, cl]
                        else:
                            xf = x[ni, cbk, (iw0 + j) / w, (iw0 + j) % w, cl]
                        for v in static_range(nv):
                            acc[j, v] += cast(xf, vec) * wv[v]
        elif taps_inner:
            for ci in range(c):
                for r in range(lo, hi):
                    ih = ih0 + r * dh
                    for q in static_range(kw):
                        for v in static_range(nv):
                            wv[v] = deref(cast(address_of(wp[blk, ci, r, q, v * lanes]), vec_ptr))
                        for j in static_range(width):
                            if flat:
                                xf = x[ni, ci, (iw0 + j) / w, (iw0 + j) % w]
                                for v in static_range(nv):
                                    acc[j, v] += cast(xf, vec) * wv[v]
                            elif valid[j][q] and bl:
                                xv = x[ni, ci / bl, ih, iw0 + j * sw + q * dw, ci % bl]
                                for v in static_range(nv):
                                    acc[j, v] += cast(xv, vec) * wv[v]
                            elif valid[j][q]:
                                xv = x[ni, ci, ih, iw0 + j * sw + q * dw]
                                for v in static_range(nv):
                                    acc[j, v] += cast(xv, vec) * wv[v]
        else:
            # channels in blocks of cb (their input rows and weights fit half of L1); in
            # a block, one pass over (channels, kernel rows) per kernel column: a loop
            # body then reads each broadcast input value once (with the columns
            # innermost, gcc keeps the values that neighbouring taps share in registers
            # and spills accumulators), and the passes after the first read L1
            if pf_lines > 0:
                # the first column tile of a row (output row (ih0 + top) / sh) of any
                # block but the last: the row's share of the next block, from pf_first
                pf_first = 0
                pf_count = 0
                nxt = cast(address_of(wp[blk, 0, 0, 0, 0]), fptr)
                if blk + 1 < blocks and iw0 == -geo["left"]:
                    pf_first = (ih0 + top) / sh * pf_lines
                    pf_count = min(pf_lines, block_lines - pf_first)
                    nxt = cast(address_of(wp[blk + 1, 0, 0, 0, 0]), fptr)
            for cbi in range(_ceil_div(c, cb)):
                c_lo = cbi * cb
                c_hi = c_lo + cb if c % cb == 0 else min(c, c_lo + cb)
                for q in static_range(kw):
                    for ci in range(c_lo, c_hi):
                        if q == 0 and pf_lines > 0:
                            for k in static_range(per_c):
                                if ci * per_c + k < pf_count:
                                    prefetch_read(address_of(nxt[(pf_first + ci * per_c + k) * LINE_FLOATS]))
                        for r in range(lo, hi):
                            ih = ih0 + r * dh
                            for v in static_range(nv):
                                wv[v] = deref(cast(address_of(wp[blk, ci, r, q, v * lanes]), vec_ptr))
                            for j in static_range(width):
                                if valid[j][q] and bl:
                                    xv = x[ni, ci / bl, ih, iw0 + j * sw + q * dw, ci % bl]
                                    for v in static_range(nv):
                                        acc[j, v] += cast(xv, vec) * wv[v]
                                elif valid[j][q]:
                                    xv = x[ni, ci, ih, iw0 + j * sw + q * dw]
                                    for v in static_range(nv):
                                        acc[j, v] += cast(xv, vec) * wv[v]
        for j in static_range(width):
            for v in static_range(nv):
                tp = cast(address_of(tile[j * ob + v * lanes]), vec_ptr)
                tp[0] = acc[j, v]

    return conv_tile


def build_direct(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any,
                 name: str = "conv2d_cpu_direct") -> ScheduledTask:
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    wp_shape = tuple(int(d) for d in task.inputs[1].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    has_bias = len(task.inputs) > 2
    blocks, c, kh, kw, ob = wp_shape
    n, _, h, w = x_shape[:4]
    o, oh, ow = int(attributes["out_channels"]), y_shape[2], y_shape[3]
    # channel-blocked layouts (cpu_blocked.py): x or y of rank 5, L channels a pixel
    blocked_in, yl = len(x_shape) == 5, (y_shape[4] if len(y_shape) == 5 else 0)
    sh, sw = attributes["stride"]
    dh, dw = attributes["dilation"]
    top, left = attributes["padding"][0], attributes["padding"][1]
    lanes = target_lanes(target)
    if ob % lanes:
        lanes = 1
    nv = ob // lanes
    vec = vector_type(float32, lanes) if lanes > 1 else float32
    registers = vector_registers(target)
    if params.get("form", "direct") == "pixels" and not blocked_in and not yl \
            and pointwise_applies(x_shape, wp_shape, attributes, lanes):
        kernel = build_pointwise(name, x_shape, wp_shape, y_shape, has_bias, vec, lanes, registers, params,
                                 int(target.get("l2_bytes", 1 << 20)))
        return _scheduled(kernel, name, params, has_bias)
    geo = {"c": c, "kh": kh, "kw": kw, "sw": sw, "dw": dw, "dh": dh, "left": left, "w": w,
           "l1d": int(target.get("l1d_bytes", 32 << 10)), "registers": registers,
           "blocks": blocks, "top": top, "sh": sh, "pf_lines": 0}
    if params.get("order", "row") == "row":
        geo["pf_lines"] = next_block_lines(wp_shape, oh, int(target.get("l2_bytes", 1 << 20)))
    # the last block of a ragged O (80 = 32 + 32 + 16 with AVX-512) computes only the
    # vectors that hold output channels: its own micro-kernels, nv_last vectors wide
    nv_last = last_block_vectors(o, ob, lanes)
    narrow = nv_last < nv
    if flat_applies(x_shape, wp_shape, y_shape, attributes, int(params["owb"]), blocked_in or yl > 0):
        owb = int(params["owb"])
        tiles = column_tiles(oh * ow, owb)
        widths = sorted({width for _, width in tiles}, reverse=True)
        # blocked x, row order: each tile prefetches its share of the next block, where
        # that is a line or more (not 56x56's 64 -> 256: 128 lines, 224 tiles)
        lines = _ceil_div(c * ob, LINE_FLOATS)
        if blocked_in and params.get("order", "row") == "row" and lines >= len(tiles) and \
                next_block_lines(wp_shape, len(tiles), int(target.get("l2_bytes", 1 << 20))) and \
                oh * ow * lines < 1 << 31:
            geo["pf_pixels"] = oh * ow
        # one width dividing W: no tile crosses the end of an image row
        in_row = len(widths) == 1 and ow % widths[0] == 0
        kernels = [_micro_kernel(f"{name}_flat{width}", vec, lanes, nv, ob, width, ((True,),) * width, geo, x_shape, wp_shape,
                                 True, flat=True, in_row=in_row) for width in widths]
        last = [_micro_kernel(f"{name}_flat{width}_last", vec, lanes, nv_last, ob, width, ((True,),) * width, geo,
                              x_shape, wp_shape, True, flat=True, in_row=in_row)
                for width in widths] if narrow else None
        kernel = build_flat(name, x_shape, wp_shape, y_shape, has_bias, params, owb, tiles, kernels, o, last)
        return _scheduled(kernel, name, params, has_bias)
    owb = max(1, min(int(params["owb"]), ow))
    # every output row sees every kernel row: no top padding, the last row's window inside
    static_rows = top == 0 and (oh - 1) * sh + (kh - 1) * dh <= h - 1
    tiles = tile_runs(ow, owb, geo, lambda k, width, valid: (
        _micro_kernel(f"{name}_tile{k}", vec, lanes, nv, ob, width, valid, geo, x_shape, wp_shape, static_rows),
        _micro_kernel(f"{name}_tile{k}_last", vec, lanes, nv_last, ob, width, valid, geo, x_shape, wp_shape,
                      static_rows) if narrow else None))
    items = n * blocks * oh
    # work items (n, channel block, output row) in the candidate's order: the task
    # mapping turns an item number into its coordinates
    row_inner = params.get("order", "row") == "row"
    item_map = spatial(n, blocks, oh) if row_inner else spatial(n, oh, blocks)
    schedule = params.get("schedule", "dynamic")
    ragged = o % ob != 0
    ycb = y_shape[1]      # channel vectors of blocked y (zeros past O)
    b_shape = (o,) if has_bias else (1,)

    @script
    def conv2d_cpu_direct(x: f32[x_shape], wp: f32[wp_shape], b: f32[b_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(items, schedule=schedule):
            tile = local_tensor(f32, [owb * ob])
            for ni, u, v in item_map.on(item):
                blk = u if row_inner else v
                ohi = v if row_inner else u
                ih0 = ohi * sh - top
                kh_lo = 0
                kh_hi = kh
                if not static_rows:
                    clip_kernel_rows(kh_lo, kh_hi, ih0, kh, h, dh)
                for ti in static_range(len(tiles)):
                    width = tiles[ti][1]
                    kernel, kernel_last = tiles[ti][3]
                    for rep in range(tiles[ti][2]):
                        col0 = tiles[ti][0] + rep * width
                        if narrow and blk == blocks - 1:  # host `narrow` False: only the else is traced
                            kernel_last(x, wp, tile, ni, blk, ih0, col0 * sw - left, kh_lo, kh_hi)
                        else:
                            kernel(x, wp, tile, ni, blk, ih0, col0 * sw - left, kh_lo, kh_hi)
                        if yl:
                            # blocked y: a pixel's channels are contiguous, whole vectors
                            for j in range(width):
                                for v in range(ob // yl):
                                    cv = blk * (ob // yl) + v
                                    if cv < ycb:
                                        for li in range(yl):
                                            oc = cv * yl + li
                                            if o % yl == 0:
                                                bias = b[oc] if has_bias else 0.0
                                                y[ni, cv, ohi, col0 + j, li] = tile[j * ob + v * yl + li] + bias
                                            elif oc < o:
                                                bias = b[oc] if has_bias else 0.0
                                                y[ni, cv, ohi, col0 + j, li] = tile[j * ob + v * yl + li] + bias
                                            else:    # lanes past O: zero weights, no bias
                                                y[ni, cv, ohi, col0 + j, li] = tile[j * ob + v * yl + li]
                        else:
                            for t in range(ob):
                                oc = blk * ob + t
                                if not ragged or oc < o:
                                    bias = b[oc] if has_bias else 0.0
                                    for j in range(width):
                                        y[ni, oc, ohi, col0 + j] = tile[j * ob + t] + bias

    return _scheduled(conv2d_cpu_direct, name, params, has_bias)


def _scheduled(kernel: Any, name: str, params: Mapping[str, Any], has_bias: bool) -> ScheduledTask:
    refs, workspace = bias_buffers(has_bias, (1,))
    return ScheduledTask(script_module(kernel, name=name), (Launch(name, refs),), workspace,
                         source="ops.conv2d_cpu_direct", params=dict(params),
                         stores_once=True)  # every form: disjoint tiles, each y element stored once


class CpuDirectConv2d(CpuFloat32Template):
    """float32 ``conv2d_packed`` on the CPU (see the module docstring)."""

    name = "ops.conv2d_cpu_direct"
    operator = PACKED_OPERATOR

    def space(self, target: Any, level: int) -> list[dict]:
        # the rewrite packs two vectors of output channels (cpu_conv.block_width)
        return conv_space(target, level, 2 * target_lanes(target))

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_direct(task, attributes, params, target)
