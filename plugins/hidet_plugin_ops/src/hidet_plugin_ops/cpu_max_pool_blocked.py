"""max_pool2d in the channel-blocked layout (`cpu_blocked.py`): the operator and its CPU kernel.

``max_pool2d_blocked(xb, kernel, stride, dilation, pads, out)`` is `pooling.max_pool2d`
(the same window geometry, padding never wins, a NaN in a window is its maximum) on ``[N, Cb, H, W, L]``
→ ``[N, Cb, OH, OW, L]``: channel block by channel block, the L lanes of a pixel pooled
alike. `rules_blocked_chain.chain_pool` makes it where a ``max_pool2d`` reads the
blocked output of a chain's convolution (ResNet-50's stem → 3x3/2 max pool → layer1),
so the chain does not leave the blocked layout for the pool: the stem writes blocked
and layer1's first convolutions read it (onnxruntime's NCHWc path does the same).

The kernel is `cpu_max_pool.py`'s, with a pixel's L channels as the innermost
(contiguous, one SIMD vector) run::

    parallel over items (n, channel block, block of rb output rows), handed out dynamically:
        for each output row:
            row[w, l] = max over the kernel rows inside the image of x[n, cb, ih, w, l]
                    (whole input rows of W*L contiguous floats, in one pass where all
                     kernel rows are inside; rows in the padding are loop bounds)
            y[n, cb, oh, ow, l] = max over kw of row[ow * sw - left + kw * dw, l]
                    (columns whose window lies inside the image: one loop, no check;
                     the border columns unrolled with their inside taps only)

Every inner loop runs over the L lanes (the machine's vector width), so it is one vector
maximum per tap. The maximum is `maximum` (numpy's, a NaN is kept) started from the
lowest value, as in `cpu_max_pool.py`. y is written by element stores
(epilogues graft).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.compute import compute, reduce, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir.expr import const
from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, local_tensor, parallel, script, static_range
from hidet_framework.schedule.scheduled_task import ScheduledTask

from .common import describe, make_operator, require_tensor
from .cpu_blocked import read_padded_at
from .cpu_max_pool import column_split
from .cpu_scheduling import CpuFloat32Template, balanced_row_blocks, clip_kernel_rows, one_kernel_task, pool_window
from .pooling import Window2d, output_extent, window_origin

__all__ = ["MAX_POOL_BLOCKED", "max_pool2d_blocked", "CpuMaxPool2dBlocked", "build_max_pool_blocked", "ITEM_PIXELS"]

MAX_POOL_BLOCKED = "max_pool2d_blocked"
ITEM_PIXELS = 64     # output pixels (of L channels each) an item computes at least


def max_pool2d_blocked(xb: Tensor, kernel: tuple, stride: tuple, dilation: tuple, pads: tuple,
                       out: tuple) -> Tensor:
    """`pooling.max_pool2d` on a blocked ``[N, Cb, H, W, L]`` with the window of a
    `pooling.Window2d` (`pads` = (top, left, bottom, right), `out` = (OH, OW), as
    `pooling.window_2d` made them). Returns blocked ``[N, Cb, OH, OW, L]``."""
    xb = require_tensor(MAX_POOL_BLOCKED, xb)
    if xb.rank != 5:
        raise ShapeError(f"{MAX_POOL_BLOCKED}: expects [N, Cb, H, W, L], got {describe(xb)}")
    win = Window2d(tuple(kernel), tuple(stride), tuple(dilation), tuple(pads), tuple(out))
    n, cb, h, w, lanes = xb.shape
    for d in range(2):   # the extent window_2d gives in floor or in ceil mode
        extents = {output_extent((h, w)[d], win.kernel[d], win.stride[d], win.dilation[d], win.pads[d],
                                 win.pads[d + 2], ceil_mode) for ceil_mode in (False, True)}
        if None in extents or win.out[d] not in extents:
            raise ShapeError(f"{MAX_POOL_BLOCKED}: output extent {win.out} does not fit {describe(xb)} "
                             f"with kernel {win.kernel}, stride {win.stride}, dilation {win.dilation}, pads {win.pads}")
    node = tensor_input("xb", xb.dtype, xb.shape)
    lowest = const(xb.dtype.min_value(), xb.dtype)

    def element(ni, bi, ohi, owi, li):
        h0, w0 = window_origin(win, 0, ohi), window_origin(win, 1, owi)

        def tap(i, j):
            hh = h0 + (i * win.dilation[0] if win.dilation[0] != 1 else i)
            ww = w0 + (j * win.dilation[1] if win.dilation[1] != 1 else j)
            return read_padded_at(node, [ni, bi], hh, ww, [li], (h, w), lowest)

        return reduce(win.kernel, tap, "max")

    y = compute("y", [n, cb, win.out[0], win.out[1], lanes], element, dtype=xb.dtype)
    return make_operator(MAX_POOL_BLOCKED, [xb], [node], [y], win.attributes())[0]


def build_max_pool_blocked(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                           target: Any) -> ScheduledTask:
    x_shape, y_shape, (oh, ow), (kh, kw), (sh, sw), (dh, dw), (top, left) = pool_window(task, attributes)
    n, cbs, h, w, lanes = x_shape
    a, b, border = column_split(ow, w, kw, sw, dw, left)
    rb, blocks = balanced_row_blocks(oh, int(params.get("rows", 0)) or -(-ITEM_PIXELS // ow))   # 0: the default
    item_map = spatial(n, cbs, blocks)
    lowest = float("-inf")
    name = "max_pool2d_blocked_cpu"

    @script
    def max_pool2d_blocked_cpu(x: f32[x_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * cbs * blocks, schedule="dynamic"):
            row = local_tensor(f32, [w * lanes])
            for ni, cb, blk in item_map.on(item):
                for rr in range(min(rb, oh - blk * rb)):
                    ohi = blk * rb + rr
                    ih0 = ohi * sh - top
                    kh_lo = 0
                    kh_hi = kh
                    clip_kernel_rows(kh_lo, kh_hi, ih0, kh, h, dh)
                    if kh_hi - kh_lo == kh:     # every kernel row inside the image: one pass
                        for iw in range(w):
                            for li in range(lanes):
                                v = x[ni, cb, ih0, iw, li]
                                for r in static_range(1, kh):
                                    v = max(x[ni, cb, ih0 + r * dh, iw, li], v)   # the new value first
                                row[iw * lanes + li] = v
                    else:
                        for iw in range(w):
                            for li in range(lanes):
                                row[iw * lanes + li] = lowest
                        for r in range(kh_lo, kh_hi):
                            for iw in range(w):
                                for li in range(lanes):
                                    row[iw * lanes + li] = max(x[ni, cb, ih0 + r * dh, iw, li], row[iw * lanes + li])
                    for o in range(a, b):
                        for li in range(lanes):
                            m = row[(o * sw - left) * lanes + li]
                            for q in static_range(1, kw):
                                m = max(row[(o * sw - left + q * dw) * lanes + li], m)
                            y[ni, cb, ohi, o, li] = m
                    for k in static_range(len(border)):
                        col, taps = border[k]
                        for li in range(lanes):
                            mb = lowest
                            for t in static_range(len(taps)):
                                mb = max(row[(col * sw - left + taps[t] * dw) * lanes + li], mb)
                            y[ni, cb, ohi, col, li] = mb

    return one_kernel_task(max_pool2d_blocked_cpu, name, params)


class CpuMaxPool2dBlocked(CpuFloat32Template):
    """float32 ``max_pool2d_blocked`` on the CPU (see the module docstring)."""

    name = "ops.max_pool2d_blocked_cpu"
    operator = MAX_POOL_BLOCKED
    rank = 5

    def space(self, target: Any, level: int) -> list[dict]:
        return [{"rows": 0}] + ([{"rows": 1}] if level > 0 else [])

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_max_pool_blocked(task, attributes, params, target)
