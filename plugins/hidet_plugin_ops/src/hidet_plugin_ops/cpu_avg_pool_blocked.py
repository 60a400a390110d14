"""avg_pool2d in the channel-blocked layout (`cpu_blocked.py`): the operator and its CPU kernel.

``avg_pool2d_blocked(xb, kernel, stride, pads, out, count_include_pad)`` is
`pooling.avg_pool2d` (the same window geometry and divisor, `pooling.avg_count`) on
``[N, Cb, H, W, L]`` → ``[N, Cb, OH, OW, L]``, the L lanes of a pixel pooled alike.
`rules_blocked_chain.chain_avg_pool` makes it where an ``avg_pool2d`` reads the blocked
output of a chain (Inception-V3's 3x3/1 branch pools read the blocked concatenation of
the block before and feed a 1x1 convolution: with this the block stays blocked; read
through a grafted ``from_blocked`` instead, the NCHW kernel took 0.39 ms a pass for
192 channels at 35x35 against 0.1 for NCHW input, one Zen 4 thread).

The kernel is `cpu_avg_pool.py`'s rows-then-columns form with a pixel's L channels as
the innermost (contiguous, one SIMD vector) run::

    parallel over items (n, channel block, output row), handed out dynamically:
        row = [0] * left + [.] * W + [0] * right'        (L lanes each; margins zeroed once)
        for each output row:
            row[left + iw, l] = sum over the kernel rows of x[n, cb, ih, iw, l]
                    (rows whose window lies inside the image: the kh taps in one pass;
                     the border rows, known while building, with their inside taps,
                     times kh / rows counted)
            y[n, cb, oh, ow, l] = (sum over kw of row[ow * sw + kw, l]) / (kh * kw)
                    (every column in one loop, the padding taps read the zero margins;
                     the columns whose divisor is not kh * kw stored again with theirs)

Loads of the row read whole vectors where they were stored, so the column pass can run
right after each row (no store-forwarding stall, unlike the NCHW kernel's shifted
loads). One output row an item by default: alone on one Zen 4 thread (300 alternated
calls) 28 us for 2048 channels at 8x8 against 70 for runs of ITEM_PIXELS an item (there
a whole plane; the NCHW kernel: 44), the same within noise at 17x17x768 (40 / 40 us) and
35x35x288 (112 / 115); whole planes an item are slower still (130, 479 us). Runs of
ITEM_PIXELS (``rows`` 0) are the second candidate. Windows that count no position
(0 / 0) are refused, as in `cpu_avg_pool.py`, and so are rows wider than
`cpu_max_pool.BUFFER_FLOATS` (the row lives on the stack).
y is written by element stores (epilogues graft).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.compute import compute, reduce, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir.expr import cast, const
from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, local_tensor, parallel, script, static_range
from hidet_framework.schedule.scheduled_task import ScheduledTask

from .common import describe, make_operator, require_tensor
from .cpu_avg_pool import column_extent
from .cpu_blocked import read_padded_at
from .cpu_max_pool import BUFFER_FLOATS, column_split, margins
from .cpu_scheduling import CpuFloat32Template, balanced_row_blocks, one_kernel_task, pool_window
from .pooling import Window2d, avg_count, output_extent, window_origin

__all__ = ["AVG_POOL_BLOCKED", "avg_pool2d_blocked", "CpuAvgPool2dBlocked", "build_avg_pool_blocked", "fits",
           "ITEM_PIXELS"]

AVG_POOL_BLOCKED = "avg_pool2d_blocked"
ITEM_PIXELS = 64     # output pixels (of L channels each) an item of the second candidate computes at least


def avg_pool2d_blocked(xb: Tensor, kernel: tuple, stride: tuple, pads: tuple, out: tuple,
                       count_include_pad: bool, ceil_mode: bool = False) -> Tensor:
    """`pooling.avg_pool2d` on a blocked ``[N, Cb, H, W, L]`` with the window of a
    `pooling.Window2d` (`pads` = (top, left, bottom, right), `out` = (OH, OW), as
    `pooling.window_2d` made them with `ceil_mode`). Returns blocked ``[N, Cb, OH, OW, L]``."""
    xb = require_tensor(AVG_POOL_BLOCKED, xb)
    if xb.rank != 5 or not xb.dtype.is_float():
        raise ShapeError(f"{AVG_POOL_BLOCKED}: expects a float [N, Cb, H, W, L], got {describe(xb)}")
    win = Window2d(tuple(kernel), tuple(stride), (1, 1), tuple(pads), tuple(out))
    n, cb, h, w, lanes = xb.shape
    for d in range(2):
        extent = output_extent((h, w)[d], win.kernel[d], win.stride[d], 1, win.pads[d], win.pads[d + 2], ceil_mode)
        if extent is None or extent != win.out[d]:
            raise ShapeError(f"{AVG_POOL_BLOCKED}: output extent {win.out} does not fit {describe(xb)} with kernel "
                             f"{win.kernel}, stride {win.stride}, pads {win.pads}, ceil_mode {ceil_mode}")
    node = tensor_input("xb", xb.dtype, xb.shape)

    def element(ni, bi, ohi, owi, li):
        h0, w0 = window_origin(win, 0, ohi), window_origin(win, 1, owi)
        total = reduce(win.kernel, lambda i, j: read_padded_at(node, [ni, bi], h0 + i, w0 + j, [li], (h, w),
                                                                const(0, xb.dtype)), "sum")
        return total / cast(avg_count(win, (h, w), count_include_pad, h0, w0), total.acc_dtype)

    y = compute("y", [n, cb, win.out[0], win.out[1], lanes], element, dtype=xb.dtype)
    attributes = {**win.attributes(), "ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad)}
    return make_operator(AVG_POOL_BLOCKED, [xb], [node], [y], attributes)[0]


def _divisors(attributes: Mapping[str, Any], h: int, w: int, oh: int, ow: int) -> tuple[list, list]:
    """Positions counted by the divisor of each output row and of each output column."""
    include_pad = bool(attributes.get("count_include_pad", True))
    (kh, kw), (sh, sw) = attributes["kernel"], attributes["stride"]
    top, left, bottom, right = attributes["pads"]
    return ([column_extent(o, h, kh, sh, top, bottom, include_pad) for o in range(oh)],
            [column_extent(o, w, kw, sw, left, right, include_pad) for o in range(ow)])


def fits(task: Any, attributes: Mapping[str, Any]) -> bool:
    """Every output's window counts at least one position (else its mean is 0 / 0), and
    an item's row (margins included) holds at most BUFFER_FLOATS (64 KB of the stack)."""
    _, _, h, w, lanes = (int(d) for d in task.inputs[0].shape)
    oh, ow = int(task.outputs[0].shape[2]), int(task.outputs[0].shape[3])
    rows, cols = _divisors(attributes, h, w, oh, ow)
    ml, mr, _ = margins(ow, w, attributes["kernel"][1], attributes["stride"][1], 1, attributes["pads"][1], {})
    return min(rows + cols) > 0 and (ml + w + mr) * lanes <= BUFFER_FLOATS


def build_avg_pool_blocked(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                           target: Any) -> ScheduledTask:
    x_shape, y_shape, (oh, ow), (kh, kw), (sh, sw), _, (top, left) = pool_window(task, attributes)
    n, cbs, h, w, lanes = x_shape
    counts_h, counts_w = _divisors(attributes, h, w, oh, ow)
    ta, tb, border = column_split(oh, h, kh, sh, 1, top)
    # border rows: (row, taps inside, kh / rows counted); the columns divided otherwise
    brows = [(o, taps, kh / counts_h[o]) for o, taps in border]
    fix = [(o, 1.0 / (kh * counts_w[o])) for o in range(ow) if counts_w[o] != kw]
    inner = 1.0 / (kh * kw)
    ml, mr, _ = margins(ow, w, kw, sw, 1, left, target)
    rw = (ml + w + mr) * lanes
    rb, blocks = balanced_row_blocks(oh, int(params.get("rows", 1)) or -(-ITEM_PIXELS // ow))   # 0: ITEM_PIXELS an item
    item_map = spatial(n, cbs, blocks)
    name = "avg_pool2d_blocked_cpu"

    @script
    def avg_pool2d_blocked_cpu(x: f32[x_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * cbs * blocks, schedule="dynamic"):
            row = local_tensor(f32, [rw])
            for k in range(ml * lanes):
                row[k] = 0.0
            for k in range(mr * lanes):
                row[(ml + w) * lanes + k] = 0.0
            for ni, cb, blk in item_map.on(item):
                for rr in range(min(rb, oh - blk * rb)):
                    ohi = blk * rb + rr
                    if ta <= ohi < tb:          # every kernel row inside the image: one pass
                        for iw in range(w):
                            for li in range(lanes):
                                s = x[ni, cb, ohi * sh - top, iw, li]
                                for r in static_range(1, kh):
                                    s = s + x[ni, cb, ohi * sh - top + r, iw, li]
                                row[(ml + iw) * lanes + li] = s
                    for k in static_range(len(brows)):
                        brow, taps = brows[k][0], brows[k][1]
                        if ohi == brow:
                            for iw in range(w):
                                for li in range(lanes):
                                    sr = x[ni, cb, brow * sh - top + taps[0], iw, li] if taps else 0.0
                                    for t in static_range(1, len(taps)):
                                        sr = sr + x[ni, cb, brow * sh - top + taps[t], iw, li]
                                    row[(ml + iw) * lanes + li] = sr * brows[k][2] if brows[k][2] != 1.0 else sr
                    for o in range(ow):
                        for li in range(lanes):
                            sc = row[(ml + o * sw - left) * lanes + li]
                            for q in static_range(1, kw):
                                sc = sc + row[(ml + o * sw - left + q) * lanes + li]
                            y[ni, cb, ohi, o, li] = sc * inner
                    for k in static_range(len(fix)):
                        col, scale = fix[k]
                        for li in range(lanes):
                            sf = row[(ml + col * sw - left) * lanes + li]
                            for q in static_range(1, kw):
                                sf = sf + row[(ml + col * sw - left + q) * lanes + li]
                            y[ni, cb, ohi, col, li] = sf * scale

    return one_kernel_task(avg_pool2d_blocked_cpu, name, params)


class CpuAvgPool2dBlocked(CpuFloat32Template):
    """float32 ``avg_pool2d_blocked`` on the CPU (see the module docstring); windows
    that count no position and rows wider than BUFFER_FLOATS are left to the
    auto-scheduler (`fits`)."""

    name = "ops.avg_pool2d_blocked_cpu"
    operator = AVG_POOL_BLOCKED
    rank = 5

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return super().applies(task, attributes) and fits(task, attributes)

    def space(self, target: Any, level: int) -> list[dict]:
        return [{"rows": 1}] + ([{"rows": 0}] if level > 0 else [])

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_avg_pool_blocked(task, attributes, params, target)
