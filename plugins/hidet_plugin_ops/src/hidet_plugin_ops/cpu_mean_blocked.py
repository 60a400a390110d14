"""The global spatial mean of a channel-blocked tensor (`cpu_blocked.py`): the operator and its CPU kernel.

``global_mean_blocked(xb, channels, keepdims)`` is ``reduce_mean(from_blocked(xb, channels),
axes=(2, 3), keepdims)``: ``[N, Cb, H, W, L]`` → ``[N, C, 1, 1]`` (or ``[N, C]``), the lanes
past C dropped. `rules_blocked_chain.chain_mean` makes it where a model's global average
pool reads a blocked chain, so the chain's last convolution writes blocked too (ResNet-50's
last bottleneck and its residual add, MobileNet-V2's last 1x1 with its clip, Inception-V3's
last concat) and no conversion is left before the pool.

Why a kernel of its own: reading ``from_blocked`` through the generic reduction (a grafted
element read per channel and pixel) walks each channel's H*W values 16 floats apart, and
the columns form of `reduce_mean` over (H, W) of the 5-d tensor took 118-133 us for
2048 x 7 x 7 on one Zen 4 thread (perf_notes, Session 12 rn50), against 41-49 us for the
NCHW mean: ResNet-50's last block stayed NCHW and paid an 80-92 us ``from_blocked`` of its
residual instead. Here a pixel's L channels are one vector: one vector add per pixel::

    parallel over items (n, channel block):
        acc[l] = sum over the H*W pixels of x[n, cb, h, w, l]   (L lanes: one SIMD add each)
        y[n, cb * L + l] = acc[l] / (H * W)                      for the lanes below C

Sums are float32 in pixel order per lane (the generic mean accumulates float32 too).
y is written by element stores (epilogues graft: the reshape after the pool).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.compute import compute, reduce, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.lang import attrs, f32, local_tensor, parallel, script
from hidet_framework.schedule.scheduled_task import ScheduledTask

from .common import describe, load, make_operator, require_tensor
from .cpu_scheduling import CpuFloat32Template, one_kernel_task

__all__ = ["MEAN_BLOCKED", "global_mean_blocked", "CpuGlobalMeanBlocked", "build_mean_blocked"]

MEAN_BLOCKED = "global_mean_blocked"


def global_mean_blocked(xb: Tensor, channels: int, keepdims: bool) -> Tensor:
    """``reduce_mean(from_blocked(xb, channels), axes=(2, 3), keepdims)`` of a blocked
    ``[N, Cb, H, W, L]``: ``[N, channels, 1, 1]`` with `keepdims`, else ``[N, channels]``."""
    xb = require_tensor(MEAN_BLOCKED, xb)
    if xb.rank != 5:
        raise ShapeError(f"{MEAN_BLOCKED}: expects [N, Cb, H, W, L], got {describe(xb)}")
    n, cb, h, w, lanes = (int(d) for d in xb.shape)
    c = int(channels)
    if not (cb - 1) * lanes < c <= cb * lanes:
        raise ShapeError(f"{MEAN_BLOCKED}: {describe(xb)} does not hold {c} channels")
    node = tensor_input("xb", xb.dtype, xb.shape)

    def element(ni, ci, *_unit):
        return reduce([h, w], lambda hi, wi: load(node, [ni, ci / lanes, hi, wi, ci % lanes]), "mean")

    shape = [n, c, 1, 1] if keepdims else [n, c]
    y = compute("y", shape, element, dtype=xb.dtype)
    return make_operator(MEAN_BLOCKED, [xb], [node], [y], {"channels": c, "keepdims": bool(keepdims)})[0]


def build_mean_blocked(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                       target: Any) -> ScheduledTask:
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    n, cbs, h, w, lanes = x_shape
    c = y_shape[1]
    count = float(h * w)
    zero = 0.0
    keepdims = len(y_shape) == 4      # y [N, C, 1, 1], else [N, C] (a host condition: one store is traced)
    name = "global_mean_blocked_cpu"

    @script
    def global_mean_blocked_cpu(x: f32[x_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * cbs):
            acc = local_tensor(f32, [lanes])
            for li in range(lanes):
                acc[li] = zero
            for hi in range(h):
                for wi in range(w):
                    for li in range(lanes):
                        acc[li] = acc[li] + x[item / cbs, item % cbs, hi, wi, li]
            for li in range(min(lanes, c - item % cbs * lanes)):
                if keepdims:
                    y[item / cbs, item % cbs * lanes + li, 0, 0] = acc[li] / count
                else:
                    y[item / cbs, item % cbs * lanes + li] = acc[li] / count

    return one_kernel_task(global_mean_blocked_cpu, name, params)


class CpuGlobalMeanBlocked(CpuFloat32Template):
    """float32 ``global_mean_blocked`` on the CPU (see the module docstring)."""

    name = "ops.global_mean_blocked_cpu"
    operator = MEAN_BLOCKED
    rank = 5

    def space(self, target: Any, level: int) -> list[dict]:
        return [{}]

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_mean_blocked(task, attributes, params, target)
