"""max_pool2d on the CPU: NCHW float32, any window (kernel, stride, dilation, pads,
ceil mode), a max over rows then a max over columns.

The auto-scheduled element loop (one output, nine taps, each tap checked against the
image and loaded behind that check) stays scalar: ResNet-50's 3x3/2 pool of 64x112x112
took 1.5 ms on one Zen 4 core against onnxruntime's 0.19 ms. Here each item is a run
of output rows of one plane (or whole planes where a plane has fewer than ITEM_OUTPUTS
outputs), in two passes over a buffer of rows (as `cpu_avg_pool.py`, which says why)::

    parallel over items (n, block of planes, block of rb output rows), dynamically:
        buf rows = [-inf] * left + [.] * w + [-inf] * right'  (margins filled once an item;
                                                              rows a whole number of vectors)
        for each plane, each output row:
            buf[row][left + iw] = max over the kernel rows of x[n, c, ih, iw]
                    (rows whose window lies inside the image: one pass a kernel row,
                     the first two together (a pass that only copied became a memcpy
                     call a row, 1.2x the kernel's time), no check, so x is read row
                     after row as one stream (the taps in one pass ran a cold
                     147-wide plane 1.4x slower, in a model pass);
                     the few border rows, known while building, with their inside taps)
        for each plane, each output row:
            y[n, c, oh, ow] = max over kw of buf[row][ow * sw + kw * dw]
                    (every column in one loop: the taps in the padding read the
                     margins, -inf, what padding contributes)

The maximum is `maximum` (numpy's: a NaN in the window is the result), as the
operator's definition, folded from -inf: a window with no tap inside the image gives
the lowest value (-inf). y is written by element stores (epilogues graft); x is read by
element reads.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, local_tensor, parallel, script, static_range
from hidet_framework.schedule.scheduled_task import ScheduledTask

from .cpu_scheduling import CpuFloat32Template, one_kernel_task, pool_window

__all__ = ["CpuMaxPool2d", "build_max_pool", "column_split", "margins", "item_blocks", "ITEM_OUTPUTS"]

ITEM_OUTPUTS = 256     # outputs an item computes at least (the hand-out's cost shared)
BUFFER_FLOATS = 16384  # an item's row buffer at most (64 KB of the thread's stack), one row at least


def item_blocks(c: int, oh: int, ow: int, params: Mapping[str, Any], rw: int) -> tuple[int, int, int, int]:
    """(planes an item computes, items along C, output rows an item computes, items per
    plane): ``params["rows"]`` rows of one plane, or by default ITEM_OUTPUTS outputs or
    more: a run of rows, or whole planes where one plane has fewer; as many as a buffer
    of BUFFER_FLOATS holds in rows of `rw` (a wide window over few outputs); balanced."""
    cap = max(1, BUFFER_FLOATS // rw)
    rb = min(oh, cap, max(1, int(params.get("rows", 0)) or -(-ITEM_OUTPUTS // ow)))   # 0: the default
    pb = 1 if rb < oh or params.get("rows") else min(c, max(1, cap // oh), max(1, -(-ITEM_OUTPUTS // (oh * ow))))
    blocks, cblocks = -(-oh // rb), -(-c // pb)
    return -(-c // cblocks), cblocks, -(-oh // blocks), blocks


def column_split(ow: int, w: int, kw: int, sw: int, dw: int, left: int) -> tuple[int, int, list]:
    """(a, b, border): output columns a..b-1 have every tap inside the image (a run:
    a window's first and last column grow with ow); `border` lists (column, taps
    inside) for the others."""
    inside = [tuple(q for q in range(kw) if 0 <= o * sw - left + q * dw < w) for o in range(ow)]
    full = [o for o in range(ow) if len(inside[o]) == kw]
    a, b = (full[0], full[-1] + 1) if full else (0, 0)
    return a, b, [(o, inside[o]) for o in range(ow) if not a <= o < b]


def margins(ow: int, w: int, kw: int, sw: int, dw: int, left: int, target: Any) -> tuple[int, int, int]:
    """(before, after, stride): the positions a row needs before column 0 and after
    column w - 1 for every output column's taps (the padding, and past it in ceil
    mode), and the buffer's row stride: a whole number of the target's vectors, so that
    each row starts where the first one did (a 71-wide row otherwise splits a cache
    line with nearly every load)."""
    before, after = left, max(0, (ow - 1) * sw - left + (kw - 1) * dw + 1 - w)
    lanes = max(1, int(target.get("vector_bits", 256)) // 32)
    return before, after, -(-(before + w + after) // lanes) * lanes


def build_max_pool(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                   target: Any) -> ScheduledTask:
    x_shape, y_shape, (oh, ow), (kh, kw), (sh, sw), (dh, dw), (top, left) = pool_window(task, attributes)
    n, c, h, w = x_shape
    ta, tb, border = column_split(oh, h, kh, sh, dh, top)
    ml, mr, rw = margins(ow, w, kw, sw, dw, left, target)
    pb, cblocks, rb, blocks = item_blocks(c, oh, ow, params, rw)
    item_map = spatial(n, cblocks, blocks)
    lowest = float("-inf")
    name = "max_pool2d_cpu"

    @script
    def max_pool2d_cpu(x: f32[x_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * cblocks * blocks, schedule="dynamic"):
            buf = local_tensor(f32, [pb * rb * rw])
            for rr in range(pb * rb):
                for k in range(ml):
                    buf[rr * rw + k] = lowest
                for k in range(mr):
                    buf[rr * rw + ml + w + k] = lowest
            for ni, cb, blk in item_map.on(item):
                r0 = blk * rb
                r1 = min(oh, r0 + rb)
                for p in range(min(pb, c - cb * pb)):
                    for ohi in range(max(r0, ta), min(r1, tb)):
                        if kh == 1:
                            for iw in range(w):
                                buf[(p * rb + ohi - r0) * rw + ml + iw] = x[ni, cb * pb + p, ohi * sh - top, iw]
                        else:   # the first two kernel rows in one pass (a plain copy became a memcpy call)
                            for iw in range(w):
                                buf[(p * rb + ohi - r0) * rw + ml + iw] = max(
                                    x[ni, cb * pb + p, ohi * sh - top + dh, iw], x[ni, cb * pb + p, ohi * sh - top, iw])
                        for r in static_range(2, kh):
                            for iw in range(w):
                                buf[(p * rb + ohi - r0) * rw + ml + iw] = max(
                                    x[ni, cb * pb + p, ohi * sh - top + r * dh, iw],
                                    buf[(p * rb + ohi - r0) * rw + ml + iw])
                    for k in static_range(len(border)):
                        brow, taps = border[k][0], border[k][1]
                        if r0 <= brow < r1:
                            for iw in range(w):
                                mb = lowest
                                for t in static_range(len(taps)):
                                    mb = max(x[ni, cb * pb + p, brow * sh - top + taps[t] * dh, iw], mb)
                                buf[(p * rb + brow - r0) * rw + ml + iw] = mb
                for p in range(min(pb, c - cb * pb)):
                    for rr in range(r1 - r0):
                        for o in range(ow):
                            mc = buf[(p * rb + rr) * rw + ml + o * sw - left]
                            for q in static_range(1, kw):
                                mc = max(buf[(p * rb + rr) * rw + ml + o * sw - left + q * dw], mc)
                            y[ni, cb * pb + p, r0 + rr, o] = mc

    return one_kernel_task(max_pool2d_cpu, name, params)


class CpuMaxPool2d(CpuFloat32Template):
    """float32 NCHW ``max_pool2d`` on the CPU (see the module docstring)."""

    name = "ops.max_pool2d_cpu"
    operator = "max_pool2d"
    rank = 4
    version = "2"

    def space(self, target: Any, level: int) -> list[dict]:
        return [{"rows": 0}] + ([{"rows": 1}] if level > 0 else [])

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_max_pool(task, attributes, params, target)
