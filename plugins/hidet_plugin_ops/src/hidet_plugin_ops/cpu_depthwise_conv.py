"""Depthwise convolution on the CPU: its own schedule, not a GEMM.

A depthwise conv2d (one input channel per group: ``C/groups == 1``, output channel
``o`` reads input channel ``o // (O/C)``) has KH*KW multiply-adds per output. As a
GEMM (the conv2d → matmul rewrite) it is a batch of one-column products, where a
register tile along N wastes nearly every lane; the rewrite rule leaves it alone and
this template schedules the operator directly:

    parallel over workers w:                 (task mapping spatial(workers))
        for each of w's planes (n, o) (a loop: the count grows with N*O):
            for each output row oh:
                per tap row kh: the input row (clamped into the image) and the row's
                KH x KW weights, zeroed for rows outside the image (no branch below)
                left border columns:  taps checked against the image
                interior columns:     no checks, contiguous along ow at stride 1:
                                      gcc vectorizes it (AVX2 / AVX-512 from -march)
                right border columns: taps checked
                y[n, o, oh, ow] = bias + sum   (element stores: epilogues graft here)

The border/interior split is computed from the geometry at build time; the space is
the worker count only (from the machine's cores).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, i32, local_tensor, parallel, script, script_module, static_range
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.tuner.template import Template

__all__ = ["CpuDepthwiseConv2d", "is_depthwise"]


def is_depthwise(x_shape: tuple, w_shape: tuple, groups: int) -> bool:
    """One input channel per group (depthwise, any channel multiplier)."""
    return groups > 1 and w_shape[1] == 1 and groups == x_shape[1]


def _interior(size: int, out: int, kernel: int, stride: int, dilation: int, pad: int) -> tuple[int, int]:
    """[lo, hi): output positions whose every tap lies inside the input."""
    lo = min(out, -(-pad // stride))
    last = size - 1 - (kernel - 1) * dilation + pad       # largest window origin + pad that fits
    hi = max(lo, min(out, last // stride + 1 if last >= 0 else 0))
    return lo, hi


def build_depthwise(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                    target: Any) -> ScheduledTask:
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    w_shape = tuple(int(d) for d in task.inputs[1].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    has_bias = len(task.inputs) > 2
    n, c, h, w = x_shape
    o, _, kh, kw = w_shape
    oh, ow = y_shape[2], y_shape[3]
    sh, sw = attributes["stride"]
    dh, dw = attributes["dilation"]
    top, left = attributes["padding"][0], attributes["padding"][1]
    mult = o // c
    planes = n * o
    workers = max(1, min(int(params.get("workers", target.get("cores", 1))), planes))
    per_worker = -(-planes // workers)
    lo, hi = _interior(w, ow, kw, sw, dw, left)
    owner = spatial(workers)
    b_shape = (o,) if has_bias else (1,)

    @script
    def conv2d_depthwise_cpu(x: f32[x_shape], wt: f32[w_shape], b: f32[b_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        for wk in parallel(workers):
            weff = local_tensor(f32, [kh * kw])
            rows = local_tensor(i32, [kh])
            for jw in owner.on(wk):
                for q in range(per_worker):
                    plane = jw * per_worker + q
                    if plane < planes:
                        ni = plane // o
                        oc = plane % o
                        ci = oc // mult
                        bias = b[oc] if has_bias else 0.0
                        for r in range(oh):
                            for i in static_range(kh):
                                ih = r * sh - top + i * dh
                                inside = 0 <= ih and ih < h
                                rows[i] = min(max(ih, 0), h - 1)
                                for j in static_range(kw):
                                    weff[i * kw + j] = wt[oc, 0, i, j] if inside else 0.0
                            for col in range(lo):
                                acc = bias
                                for i in static_range(kh):
                                    for j in static_range(kw):
                                        iw = col * sw - left + j * dw
                                        acc += (x[ni, ci, rows[i], iw] if 0 <= iw and iw < w else 0.0) * weff[i * kw + j]
                                y[ni, oc, r, col] = acc
                            for col in range(lo, hi):
                                acc = bias
                                for i in static_range(kh):
                                    for j in static_range(kw):
                                        acc += x[ni, ci, rows[i], col * sw - left + j * dw] * weff[i * kw + j]
                                y[ni, oc, r, col] = acc
                            for col in range(hi, ow):
                                acc = bias
                                for i in static_range(kh):
                                    for j in static_range(kw):
                                        iw = col * sw - left + j * dw
                                        acc += (x[ni, ci, rows[i], iw] if 0 <= iw and iw < w else 0.0) * weff[i * kw + j]
                                y[ni, oc, r, col] = acc

    name = "conv2d_depthwise_cpu"
    refs = (BufferRef("input", 0), BufferRef("input", 1),
            BufferRef("input", 2) if has_bias else BufferRef("workspace", 0), BufferRef("output", 0))
    workspace = ()
    if not has_bias:
        from hidet_framework.schedule.scheduled_task import WorkspaceSpec

        workspace = (WorkspaceSpec("no_bias", "float32", (1,)),)
    return ScheduledTask(script_module(conv2d_depthwise_cpu, name=name), (Launch(name, refs),), workspace,
                         source="ops.conv2d_depthwise_cpu", params=dict(params))


class CpuDepthwiseConv2d(Template):
    """float32 depthwise conv2d on the CPU (see the module docstring)."""

    name = "ops.conv2d_depthwise_cpu"
    operator = "conv2d"
    target = "cpu"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        if not all(t.dtype.name == "float32" for t in list(task.inputs) + list(task.outputs)):
            return False
        return is_depthwise(tuple(task.inputs[0].shape), tuple(task.inputs[1].shape), int(attributes["groups"]))

    def space(self, target: Any, level: int) -> list[dict]:
        cores = max(1, int(target.get("cores", 1)))
        return [{"workers": cores}] + ([{"workers": 1}] if level > 0 and cores > 1 else [])

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_depthwise(task, attributes, params, target)
