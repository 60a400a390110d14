"""max_pool2d on the CPU: NCHW float32, any window (kernel, stride, dilation, pads,
ceil mode), a max over rows then a max over columns.

The auto-scheduled element loop (one output, nine taps, each tap checked against the
image and loaded behind that check) stays scalar: ResNet-50's 3x3/2 pool of 64x112x112
took 1.5 ms on one Zen 4 core against onnxruntime's 0.19 ms. Here each item is a run
of output rows of one plane::

    parallel over items (n, c, block of rb output rows), handed out dynamically:
        for each output row:
            row[w] = max over the kernel rows inside the image of x[n, c, ih, w]
                    (whole input rows, contiguous: vector maxima; rows in the
                     padding are loop bounds)
            y[n, c, oh, ow] = max over kw of row[ow * sw - left + kw * dw]
                    (columns whose window lies inside the image: one loop, no check;
                     the few border columns unrolled with their inside taps only,
                     known while building)

The maximum is `maximum` (``b > a ? b : a``), as the operator's definition: a NaN
never wins, and a window with no tap inside the image gives the lowest value (-inf),
which is also what padding contributes. y is written by element stores (epilogues
graft); x is read by element reads.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, local_tensor, parallel, script, script_module, static_range
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

__all__ = ["CpuMaxPool2d", "build_max_pool", "column_split", "row_blocks", "ITEM_OUTPUTS"]

ITEM_OUTPUTS = 256     # outputs an item computes at least (the hand-out's cost shared)


def row_blocks(oh: int, ow: int, params: Mapping[str, Any]) -> tuple[int, int]:
    """(output rows an item computes, items per plane): ``params["rows"]`` rows, or by
    default enough rows for ITEM_OUTPUTS outputs, then balanced over the blocks."""
    rb = min(oh, max(1, int(params.get("rows", 0)) or -(-ITEM_OUTPUTS // ow)))   # 0: the default
    blocks = -(-oh // rb)
    return -(-oh // blocks), blocks


def column_split(ow: int, w: int, kw: int, sw: int, dw: int, left: int) -> tuple[int, int, list]:
    """(a, b, border): output columns a..b-1 have every tap inside the image (a run:
    a window's first and last column grow with ow); `border` lists (column, taps
    inside) for the others."""
    inside = [tuple(q for q in range(kw) if 0 <= o * sw - left + q * dw < w) for o in range(ow)]
    full = [o for o in range(ow) if len(inside[o]) == kw]
    a, b = (full[0], full[-1] + 1) if full else (0, 0)
    return a, b, [(o, inside[o]) for o in range(ow) if not a <= o < b]


def build_max_pool(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                   target: Any) -> ScheduledTask:
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    n, c, h, w = x_shape
    oh, ow = y_shape[2], y_shape[3]
    kh, kw = attributes["kernel"]
    sh, sw = attributes["stride"]
    dh, dw = attributes["dilation"]
    top, left = attributes["pads"][0], attributes["pads"][1]
    a, b, border = column_split(ow, w, kw, sw, dw, left)
    rb, blocks = row_blocks(oh, ow, params)
    item_map = spatial(n, c, blocks)
    lowest = float("-inf")
    name = "max_pool2d_cpu"

    @script
    def max_pool2d_cpu(x: f32[x_shape], y: f32[y_shape]):
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
                        kh_lo = (dh - 1 - ih0) / dh
                    if h - 1 - ih0 < 0:
                        kh_hi = 0
                    else:
                        kh_hi = min(kh, (h - 1 - ih0) / dh + 1)
                    for iw in range(w):
                        row[iw] = lowest
                    for r in range(kh_lo, kh_hi):
                        for iw in range(w):
                            row[iw] = max(row[iw], x[ni, ci, ih0 + r * dh, iw])
                    for o in range(a, b):
                        m = row[o * sw - left]
                        for q in static_range(1, kw):
                            m = max(m, row[o * sw - left + q * dw])
                        y[ni, ci, ohi, o] = m
                    for k in static_range(len(border)):
                        col, taps = border[k]
                        mb = lowest
                        for t in static_range(len(taps)):
                            mb = max(mb, row[col * sw - left + taps[t] * dw])
                        y[ni, ci, ohi, col] = mb

    return ScheduledTask(script_module(max_pool2d_cpu, name=name),
                         (Launch(name, (BufferRef("input", 0), BufferRef("output", 0))),), (),
                         source="ops.max_pool2d_cpu", params=dict(params))


class CpuMaxPool2d(Template):
    """float32 NCHW ``max_pool2d`` on the CPU (see the module docstring)."""

    name = "ops.max_pool2d_cpu"
    operator = "max_pool2d"
    target = "cpu"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return all(t.dtype.name == "float32" for t in list(task.inputs) + list(task.outputs)) \
            and len(task.inputs[0].shape) == 4

    def space(self, target: Any, level: int) -> list[dict]:
        return [{"rows": 0}] + ([{"rows": 1}] if level > 0 else [])

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_max_pool(task, attributes, params, target)
