"""Depthwise convolution on the CPU in the channel-blocked layout (`cpu_blocked.py`).

x ``[N, Cb, H, W, L]``, weights ``[Cb, KH, KW, L]``, bias ``[Cb, L]``, y ``[N, Cb, OH,
OW, L]``: one pixel's L channels are one SIMD vector, so each tap of an output pixel is
one vector load of x where it lies and one FMA with the tap's weight vector. No copy
of the input, no transposition, no border case inside a tile (the unblocked kernel,
`cpu_depthwise_conv.py`, copies each item's rows into a phase tile first: in a model
pass that copy followed by unaligned loads of the same buffer cost it 1.7-2x its time
alone; docs/perf_notes.md, session 7)::

    parallel over items (n, channel block, block of rb output rows), handed out dynamically:
        for each output row: kernel rows inside the image (loop bounds)
            for each column tile (static: positions fixed by the shape):
                micro-kernel: width accumulator vectors over (kernel row, kernel column);
                taps in the left/right padding dropped while tracing (the tile's
                position is static); the tap's weight vector loaded once per tile
                y[n, cb, oh, ow, l] = acc + bias    (element stores: epilogues graft)

Tiles are ``U`` pixels wide (`cpu_depthwise_conv._unroll`: accumulators beside a weight
and a load in the register file, 8 with AVX-512, 6 with AVX2), placed with
`column_tiles`; interior tiles of one width share one micro-kernel and run as a loop.
``rb`` gives an item at least `ITEM_PIXELS` output pixels (a 7x7 plane is one item).
The lanes past C (zero weights and bias) compute zeros.
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

from .cpu_blocked import DEPTHWISE_BLOCKED
from .cpu_conv_plan import tile_runs
from .cpu_depthwise_conv import _unroll
from .cpu_scheduling import CpuFloat32Template, balanced_row_blocks, bias_buffers, clip_kernel_rows

__all__ = ["CpuDepthwiseBlocked", "build_depthwise_blocked", "ITEM_PIXELS"]

ITEM_PIXELS = 64     # output pixels an item computes at least (the hand-out's cost shared)


def _tile_kernel(key: str, vec: Any, lanes: int, width: int, valid: tuple, geo: dict, x_shape: tuple,
                 w_shape: tuple):
    vec_ptr = PointerType(vec)
    kw, sw, dw, dh = geo["kw"], geo["sw"], geo["dw"], geo["dh"]

    @script
    def dw_tile(x: f32[x_shape], wp: f32[w_shape], tile: f32[width * lanes], ni: i32, cb: i32, ih0: i32,
                iw0: i32, kh_lo: i32, kh_hi: i32):
        attrs.func_kind = "device"
        attrs.func_name = key
        acc = register_tensor(vec, [width])
        for j in static_range(width):
            acc[j] = cast(0.0, vec)
        for r in range(kh_lo, kh_hi):
            ih = ih0 + r * dh
            for q in static_range(kw):
                wv = deref(cast(address_of(wp[cb, r, q, 0]), vec_ptr))
                for j in static_range(width):
                    if valid[j][q]:
                        acc[j] += deref(cast(address_of(x[ni, cb, ih, iw0 + j * sw + q * dw, 0]), vec_ptr)) * wv
        for j in static_range(width):
            tp = cast(address_of(tile[j * lanes]), vec_ptr)
            tp[0] = acc[j]

    return dw_tile


def build_depthwise_blocked(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                            target: Any) -> ScheduledTask:
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    w_shape = tuple(int(d) for d in task.inputs[1].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    has_bias = len(task.inputs) > 2
    n, cbs, h, w, lanes = x_shape
    _, kh, kw, _ = w_shape
    oh, ow = y_shape[2], y_shape[3]
    sh, sw = attributes["stride"]
    dh, dw = attributes["dilation"]
    top, left = attributes["padding"][0], attributes["padding"][1]
    vec = vector_type(float32, lanes) if lanes > 1 else float32
    u = max(1, int(params.get("unroll", _unroll(target, kh * kw))))
    geo = {"kw": kw, "sw": sw, "dw": dw, "dh": dh, "left": left, "w": w}
    tiles = tile_runs(ow, u, geo, lambda k, width, valid: _tile_kernel(
        f"conv2d_dw_blocked_tile{k}", vec, lanes, width, valid, geo, x_shape, w_shape))
    rb, blocks = balanced_row_blocks(oh, int(params.get("rows", -(-ITEM_PIXELS // ow))))
    item_map = spatial(n, cbs, blocks)
    b_shape = (cbs, lanes) if has_bias else (1, 1)
    name = "conv2d_dw_blocked_cpu"

    @script
    def conv2d_dw_blocked_cpu(x: f32[x_shape], wp: f32[w_shape], b: f32[b_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * cbs * blocks, schedule="dynamic"):
            tile = local_tensor(f32, [u * lanes])
            for ni, cb, blk in item_map.on(item):
                for rr in range(min(rb, oh - blk * rb)):
                    ohi = blk * rb + rr
                    ih0 = ohi * sh - top
                    kh_lo = 0
                    kh_hi = kh
                    clip_kernel_rows(kh_lo, kh_hi, ih0, kh, h, dh)
                    for ti in static_range(len(tiles)):
                        width = tiles[ti][1]
                        kernel = tiles[ti][3]
                        for rep in range(tiles[ti][2]):
                            col0 = tiles[ti][0] + rep * width
                            kernel(x, wp, tile, ni, cb, ih0, col0 * sw - left, kh_lo, kh_hi)
                            for j in range(width):
                                for li in range(lanes):
                                    bias = b[cb, li] if has_bias else 0.0
                                    y[ni, cb, ohi, col0 + j, li] = tile[j * lanes + li] + bias

    refs, workspace = bias_buffers(has_bias, (1, 1))
    return ScheduledTask(script_module(conv2d_dw_blocked_cpu, name=name), (Launch(name, refs),), workspace,
                         source="ops.conv2d_dw_blocked_cpu", params=dict(params))


class CpuDepthwiseBlocked(CpuFloat32Template):
    """float32 ``conv2d_depthwise_blocked`` on the CPU (see the module docstring)."""

    name = "ops.conv2d_dw_blocked_cpu"
    operator = DEPTHWISE_BLOCKED

    def space(self, target: Any, level: int) -> list[dict]:
        u = _unroll(target, 9)
        out = [{"unroll": u}]
        if level > 0:
            out += [{"unroll": k} for k in (4, 6) if k < u] + [{"unroll": u, "rows": 1}]
        return out

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_depthwise_blocked(task, attributes, params, target)
