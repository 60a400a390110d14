"""avg_pool2d on the CPU: NCHW float32, any window (kernel, stride, pads, ceil mode,
either divisor), a sum over rows then a sum over columns.

Inception-V3's nine 3x3/1 pools with padding 1 took 1.45-1.77 ms a pass on one Zen 4
core in the depthwise template (`CpuAvgPool2d`: a padded copy of each tile, then nine
FMAs an output) against onnxruntime's 0.71 (session 10, docs/perf_notes.md). Here, as
`cpu_max_pool.py` does for the maximum, each item is a run of output rows of one
plane::

    parallel over items (n, c, block of rb output rows), handed out dynamically:
        for each output row:
            row[w] = sum over the kernel rows inside the image of x[n, c, ih, w]
                    (whole input rows, contiguous: vector adds; rows in the padding
                     are loop bounds and add nothing)
            y[n, c, oh, ow] = (sum over kw of row[ow * sw - left + kw]) * scale[oh, ow]
                    (columns whose window lies inside the image: one loop, no check;
                     the few border columns unrolled with their inside taps only,
                     known while building)

A 3x3 window costs 2 + 2 adds an output instead of 9 multiply-adds. The divisor is the
window's extent along H times its extent along W (`count_include_pad`: the positions
inside the padded input, else inside the image), so the scale of a row is computed
once per output row and a column's factor is known while building; the sum is
multiplied by 1 / (rows x columns), within an ulp of the operator's division. y is
written by element stores (epilogues graft); x is read by element reads.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.dtypes import float32
from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, cast, f32, local_tensor, parallel, script, script_module, static_range
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

from .cpu_max_pool import column_split, row_blocks

__all__ = ["CpuAvgPool2dRows", "build_avg_pool", "column_extent"]


def column_extent(o: int, w: int, kw: int, sw: int, left: int, right: int, include_pad: bool) -> int:
    """Positions of output column `o`'s window counted by the divisor: inside the padded
    input (`include_pad`) or inside the image."""
    start = o * sw - left
    if include_pad:
        return min(start + kw, w + right) - start
    return min(start + kw, w) - max(start, 0)


def build_avg_pool(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                   target: Any) -> ScheduledTask:
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    n, c, h, w = x_shape
    oh, ow = y_shape[2], y_shape[3]
    kh, kw = attributes["kernel"]
    sh, sw = attributes["stride"]
    top, left, bottom, right = attributes["pads"]
    include_pad = bool(attributes.get("count_include_pad", True))
    a, b, border = column_split(ow, w, kw, sw, 1, left)
    inner = float(kw)          # an interior column's window lies inside the image: kw either way
    edge = [(col, taps, float(column_extent(col, w, kw, sw, left, right, include_pad))) for col, taps in border]
    rb, blocks = row_blocks(oh, ow, params)
    item_map = spatial(n, c, blocks)
    name = "avg_pool2d_cpu_rows"

    @script
    def avg_pool2d_cpu_rows(x: f32[x_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * c * blocks, schedule="dynamic"):
            row = local_tensor(f32, [w])
            for ni, ci, blk in item_map.on(item):
                for rr in range(min(rb, oh - blk * rb)):
                    ohi = blk * rb + rr
                    ih0 = ohi * sh - top
                    kh_lo = 0
                    kh_hi = kh
                    if ih0 < 0:
                        kh_lo = -ih0
                    if h - 1 - ih0 < 0:
                        kh_hi = 0
                    else:
                        kh_hi = min(kh, h - ih0)
                    rows_counted = kh_hi - kh_lo
                    if include_pad:
                        rows_counted = min(ih0 + kh, h + bottom) - ih0
                    rscale = 1.0 / cast(rows_counted, float32)
                    for iw in range(w):
                        row[iw] = 0.0
                    for r in range(kh_lo, kh_hi):
                        for iw in range(w):
                            row[iw] = row[iw] + x[ni, ci, ih0 + r, iw]
                    for o in range(a, b):
                        s = row[o * sw - left]
                        for q in static_range(1, kw):
                            s = s + row[o * sw - left + q]
                        y[ni, ci, ohi, o] = s * (rscale / inner)
                    for k in static_range(len(edge)):
                        col, taps, cols_counted = edge[k]
                        sb = 0.0
                        for t in static_range(len(taps)):
                            sb = sb + row[col * sw - left + taps[t]]
                        y[ni, ci, ohi, col] = sb * (rscale / cols_counted)

    return ScheduledTask(script_module(avg_pool2d_cpu_rows, name=name),
                         (Launch(name, (BufferRef("input", 0), BufferRef("output", 0))),), (),
                         source="ops.avg_pool2d_cpu_rows", params=dict(params))


class CpuAvgPool2dRows(Template):
    """float32 NCHW ``avg_pool2d`` on the CPU, rows then columns (module docstring);
    above the depthwise form (`CpuAvgPool2d`), which stays in the space of level 1."""

    name = "ops.avg_pool2d_cpu_rows"
    operator = "avg_pool2d"
    target = "cpu"
    version = "1"
    priority = 11

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return all(t.dtype.name == "float32" for t in list(task.inputs) + list(task.outputs)) \
            and len(task.inputs[0].shape) == 4

    def space(self, target: Any, level: int) -> list[dict]:
        return [{"rows": 0}] + ([{"rows": 1}] if level > 0 else [])

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_avg_pool(task, attributes, params, target)
