"""avg_pool2d on the CPU: NCHW float32, any window (kernel, stride, pads, ceil mode,
either divisor), a sum over rows then a sum over columns.

Inception-V3's nine 3x3/1 pools with padding 1 took 1.45-1.77 ms a pass on one Zen 4
core in the depthwise template (`CpuAvgPool2d`: a padded copy of each tile, then nine
FMAs an output) against onnxruntime's 0.71 (session 10, docs/perf_notes.md). Here, as
`cpu_max_pool.py` does for the maximum, each item is a run of output rows of one
plane (or, where a plane has fewer than ITEM_OUTPUTS outputs, whole planes), in two
passes over a buffer of rows::

    parallel over items (n, block of planes, block of rb output rows), dynamically:
        buf rows = [0] * left + [.] * w + [0] * right'   (margins zeroed once an item;
                                                          rows a whole number of vectors)
        for each plane, each output row:
            buf[row][left + iw] = sum over the kernel rows of x[n, c, ih, iw]
                    (rows whose window lies inside the image: the kh taps in one
                     pass, no check; the few border rows, known while building, with
                     their inside taps, times kh / rows counted)
        for each plane, each output row:
            y[n, c, oh, ow] = (sum over kw of buf[row][ow * sw + kw]) / (kh * kw)
                    (every column in one loop: the taps in the padding read the zero
                     margins; the few columns whose divisor is not kh * kw stored
                     again with theirs, known while building)

A 3x3 window costs 2 + 2 adds an output instead of 9 multiply-adds. The column sums
read each buffer row at three shifted offsets: right after that row's vector stores
those loads cannot be forwarded from the store buffer and wait for the stores, so all
rows of the item are summed first (one row at a time, a 17-wide plane ran 2.7x slower
than now). The divisor is the window's extent along H times its extent along W
(`count_include_pad`: the positions inside the padded input, else inside the image);
with the padding inside the image's window (Inception's "same" pools) every output
has kh * kw: no column fix-ups and no row factors. Windows that count no position
(padding as wide as the kernel, positions inside the image only: 0 / 0) are refused.
y is written by element stores (epilogues graft); x is read by element reads.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, local_tensor, parallel, script, static_range
from hidet_framework.schedule.scheduled_task import ScheduledTask

from .cpu_max_pool import column_split, item_blocks, margins
from .cpu_scheduling import CpuFloat32Template, one_kernel_task

__all__ = ["CpuAvgPool2dRows", "build_avg_pool", "column_extent", "counted_everywhere"]


def column_extent(o: int, w: int, kw: int, sw: int, left: int, right: int, include_pad: bool) -> int:
    """Positions of output column `o`'s window counted by the divisor: inside the padded
    input (`include_pad`) or inside the image."""
    start = o * sw - left
    if include_pad:
        return min(start + kw, w + right) - start
    return min(start + kw, w) - max(start, 0)


def _geometry(task: Any, attributes: Mapping[str, Any]) -> tuple:
    n, c, h, w = (int(d) for d in task.inputs[0].shape)
    oh, ow = (int(d) for d in task.outputs[0].shape[2:])
    include_pad = bool(attributes.get("count_include_pad", True))
    top, left, bottom, right = attributes["pads"]
    dims = ((oh, h, attributes["kernel"][0], attributes["stride"][0], top, bottom),
            (ow, w, attributes["kernel"][1], attributes["stride"][1], left, right))
    return (n, c, h, w, oh, ow, include_pad), dims


def counted_everywhere(task: Any, attributes: Mapping[str, Any]) -> bool:
    """Every output's window counts at least one position (else its mean is 0 / 0)."""
    (*_, include_pad), dims = _geometry(task, attributes)
    return all(column_extent(o, size, k, s, lo, hi, include_pad) > 0
               for out, size, k, s, lo, hi in dims for o in range(out))


def build_avg_pool(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                   target: Any) -> ScheduledTask:
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    (n, c, h, w, oh, ow, include_pad), (rows, cols) = _geometry(task, attributes)
    _, _, kh, sh, top, bottom = rows
    _, _, kw, sw, left, right = cols
    ta, tb, border = column_split(oh, h, kh, sh, 1, top)
    # border rows: (row, taps inside, kh / rows counted); the columns divided otherwise
    brows = [(o, taps, kh / column_extent(o, h, kh, sh, top, bottom, include_pad)) for o, taps in border]
    fix = [(o, 1.0 / (kh * column_extent(o, w, kw, sw, left, right, include_pad))) for o in range(ow)
           if column_extent(o, w, kw, sw, left, right, include_pad) != kw]
    inner = 1.0 / (kh * kw)
    ml, mr, rw = margins(ow, w, kw, sw, 1, left, target)
    pb, cblocks, rb, blocks = item_blocks(c, oh, ow, params, rw)
    item_map = spatial(n, cblocks, blocks)
    name = "avg_pool2d_cpu_rows"

    @script
    def avg_pool2d_cpu_rows(x: f32[x_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * cblocks * blocks, schedule="dynamic"):
            buf = local_tensor(f32, [pb * rb * rw])
            for rr in range(pb * rb):
                for k in range(ml):
                    buf[rr * rw + k] = 0.0
                for k in range(mr):
                    buf[rr * rw + ml + w + k] = 0.0
            for ni, cb, blk in item_map.on(item):
                r0 = blk * rb
                r1 = min(oh, r0 + rb)
                for p in range(min(pb, c - cb * pb)):
                    for ohi in range(max(r0, ta), min(r1, tb)):
                        for iw in range(w):
                            s = x[ni, cb * pb + p, ohi * sh - top, iw]
                            for r in static_range(1, kh):
                                s = s + x[ni, cb * pb + p, ohi * sh - top + r, iw]
                            buf[(p * rb + ohi - r0) * rw + ml + iw] = s
                    for k in static_range(len(brows)):
                        brow, taps = brows[k][0], brows[k][1]
                        if r0 <= brow < r1:
                            for iw in range(w):
                                sr = x[ni, cb * pb + p, brow * sh - top + taps[0], iw] if taps else 0.0
                                for t in static_range(1, len(taps)):
                                    sr = sr + x[ni, cb * pb + p, brow * sh - top + taps[t], iw]
                                buf[(p * rb + brow - r0) * rw + ml + iw] = sr * brows[k][2] if brows[k][2] != 1.0 else sr
                for p in range(min(pb, c - cb * pb)):
                    for rr in range(r1 - r0):
                        for o in range(ow):
                            sc = buf[(p * rb + rr) * rw + ml + o * sw - left]
                            for q in static_range(1, kw):
                                sc = sc + buf[(p * rb + rr) * rw + ml + o * sw - left + q]
                            y[ni, cb * pb + p, r0 + rr, o] = sc * inner
                        for k in static_range(len(fix)):
                            col, scale = fix[k]
                            sf = buf[(p * rb + rr) * rw + ml + col * sw - left]
                            for q in static_range(1, kw):
                                sf = sf + buf[(p * rb + rr) * rw + ml + col * sw - left + q]
                            y[ni, cb * pb + p, r0 + rr, col] = sf * scale

    return one_kernel_task(avg_pool2d_cpu_rows, name, params)


class CpuAvgPool2dRows(CpuFloat32Template):
    """float32 NCHW ``avg_pool2d`` on the CPU, rows then columns (module docstring);
    above the depthwise form (`CpuAvgPool2d`), which stays in the space of level 1 and
    takes the windows this one refuses (`counted_everywhere`)."""

    name = "ops.avg_pool2d_cpu_rows"
    operator = "avg_pool2d"
    rank = 4
    version = "2"
    priority = 11

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return super().applies(task, attributes) and counted_everywhere(task, attributes)

    def space(self, target: Any, level: int) -> list[dict]:
        return [{"rows": 0}] + ([{"rows": 1}] if level > 0 else [])

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_avg_pool(task, attributes, params, target)
