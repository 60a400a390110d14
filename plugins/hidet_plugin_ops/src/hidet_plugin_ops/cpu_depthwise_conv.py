"""Depthwise convolution on the CPU: its own schedule, not a GEMM.

A depthwise conv2d (one input channel per group: ``C/groups == 1``, output channel
``o`` reads input channel ``o // (O/C)``) has KH*KW multiply-adds per output. As a
GEMM (the conv2d → matmul rewrite) it is a batch of one-column products, where a
register tile along N wastes nearly every lane; the rewrite rule leaves it alone and
this template schedules the operator directly.

**Work items** are (image, channel, block of ``rb`` output rows), handed out
dynamically; ``rb`` is chosen so that an item's input rows fit in half the L1 data
cache (`rows_per_item`), so a 112x112 plane is cut into about 7 items. Planes that fit
one item whole are grouped (a 7x7 item holds 7 channels): the item copies all their
tiles, then computes them (see `MIN_GAP`).

**Phase tile.** An item first copies the input rows its outputs read into a local
buffer (in L1) in the padded geometry, zeros where the window leaves the image, the
rows split into ``sh`` *phases* by their parity and the columns into ``sw`` column
phases (one of each at stride 1, two of each at stride 2)::

    phase[a][b][u, v] = xpad[r0 * sh + u * sh + a, v * sw + b]     P = OW + (KW-1)*dw // sw

Tap (i, j) of output row rr, column c, reads phase ``((i*dh) % sh, (j*dw) % sw)`` at
``[rr + (i*dh)//sh, c + (j*dw)//sw]``: in the phase's flat index that is ``q +
const(i, j)`` with ``q = rr * P + c``. So the item's outputs are computed as one flat
range ``q = 0 .. rb*P`` in whole SIMD vectors (``U`` at a time), each tap one
unaligned vector load and one FMA with the broadcast weight: no border case, no mask,
no gather, at any stride, dilation, padding or plane width (a 7-wide plane fills
vectors across its rows). The ``P - OW`` extra positions of a row are computed and
dropped. (The level-1 candidate ``cols1`` keeps one column phase, every padded column:
at stride 2 twice the FMAs with contiguous copies; session 5's default, measured
slower once gcc vectorized the strided copy: 96@112 stride 2 381 -> 285 us, 576@14
stride 2 77 -> 50 us single-threaded.) The copy reads each input row once per column
phase through element reads (the padding is written, never read from x), so a
producer of x (an injective prologue) is grafted onto them: the group stays one
kernel (copying rows as whole vectors read x by address, which the fusion engine
cannot graft onto; it measured no faster).

**Store**: ``y[n, o, r0 + rr, c] = tile[rr * P + c] + bias`` (``c * sw`` with ``cols1``): element stores along the
row (gcc vectorizes them); epilogues (relu6 clip, residual add) graft onto them, and
the output is written row after row, once.

Space (from the machine only): the L1 share of an item (level 0: half) and U (level 0:
the most accumulators beside the tap weights in the register file: 8 with AVX-512's
32 registers, 6 with AVX2's 16); level 1 adds other shares and smaller U.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.dtypes import float32, vector_type
from hidet_framework.ir.mapping import spatial
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f32, local_tensor, parallel, register_tensor, script, script_module,
    static_range,
)
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec

from .cpu_conv import target_lanes, vector_registers
from .cpu_scheduling import CpuFloat32Template, bias_buffers

__all__ = ["CpuDepthwiseConv2d", "CpuAvgPool2d", "is_depthwise", "phase_geometry", "rows_per_item", "depthwise_space",
           "vectors_per_step"]


MIN_GAP = 512   # floats of tile copies per item where planes are grouped (see build_depthwise)
# independent accumulators that hide an FMA's latency (4 cycles on x86 cores since
# Haswell and Zen, at one vector FMA issued per cycle): a step of fewer vectors costs
# as much as one of this many
LATENCY_CHAINS = 4


def is_depthwise(x_shape: tuple, w_shape: tuple, groups: int) -> bool:
    """One input channel per group (depthwise, any channel multiplier)."""
    return groups > 1 and w_shape[1] == 1 and groups == x_shape[1]


def phase_geometry(kernel: tuple, stride: tuple, dilation: tuple, ow: int, cols: int = 1) -> tuple[int, int]:
    """(pitch P of a phase row: the padded columns the outputs read, extra phase rows an
    item reads past its rb rows). ``cols``: column phases (1, or the column stride:
    then a phase row holds every sw-th padded column and P is about OW)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    if cols > 1:
        return ow + ((kw - 1) * dw) // cols, ((kh - 1) * dh) // sh
    return (ow - 1) * sw + (kw - 1) * dw + 1, ((kh - 1) * dh) // sh


def column_phases(stride: tuple, params: Mapping[str, Any]) -> int:
    """Column phases of the tile: the column stride by default (only the columns the
    outputs need are computed), 1 with ``cols1`` (every column computed, the store picks)."""
    return 1 if params.get("cols1") else stride[1]


def rows_per_item(target: Any, kernel: tuple, stride: tuple, dilation: tuple, oh: int, ow: int,
                  scale: float = 1.0, cols: int = 1) -> int:
    """Output rows per work item: the phase tile and the output tile in half of L1."""
    pitch, extra = phase_geometry(kernel, stride, dilation, ow, cols)
    phases = stride[0] * cols
    budget = int(scale * int(target.get("l1d_bytes", 32 << 10)) // 2 // 4)      # floats
    rb = (budget // pitch - phases * extra) // (phases + 1)
    rb = max(1, min(oh, rb))
    blocks = -(-oh // rb)
    return -(-oh // blocks)          # balanced: the same number of blocks, rows spread evenly


def _unroll(target: Any, taps: int) -> int:
    """Vectors of outputs per step: accumulators + the tap weights (broadcast, kept in
    registers while they fit) + one load in the register file (8 with 32 registers,
    6 with 16, for a 3x3 window)."""
    registers = vector_registers(target)
    for u in (8, 6, 4, 3, 2):
        if u + min(taps, registers // 2) + 1 <= registers:
            return u
    return 1


def vectors_per_step(u: int, flat: int, lanes: int) -> int:
    """The item's ``flat`` outputs are computed in whole steps of k vectors: the k (at
    most the candidate's u) of the least time, the largest of those. A step of k
    vectors costs max(k, LATENCY_CHAINS): with fewer accumulators the taps' FMAs wait
    on each other (counting k alone chose k = 1 for 96@112 stride 2, 71 vectors
    instead of 72 with 9 dependent FMAs each: 387 -> 325 us single-threaded with
    k = 8; 576@14: 72 -> 56 us)."""
    return min(range(u, 0, -1), key=lambda k: -(-flat // (k * lanes)) * max(k, LATENCY_CHAINS))


def depthwise_space(target: Any, level: int) -> list[dict]:
    """``l1``: the share of L1 an item's tiles take (scales `rows_per_item`); ``unroll``:
    vectors per step. Level 0: half of L1, the register file's unroll."""
    u = _unroll(target, 9)
    out = [{"l1": 1.0, "unroll": u}]
    if level > 0:
        out += [{"l1": 0.5, "unroll": u}, {"l1": 2.0, "unroll": u}, {"l1": 4.0, "unroll": u}]
        out += [{"l1": 1.0, "unroll": k} for k in (1, 2) if k != u]
        out += [{"l1": 1.0, "unroll": u, "cols1": True}]
    return out


def build_depthwise(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                    target: Any, pool: bool = False) -> ScheduledTask:
    """The depthwise kernel; ``pool=True``: avg_pool2d's (weights 1, no bias, the sum
    divided by the window's count in the store, as pooling.py defines it)."""
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    n, c, h, w = x_shape
    oh, ow = y_shape[2], y_shape[3]
    sh, sw = attributes["stride"]
    dh, dw = attributes["dilation"]
    if pool:
        (kh, kw), pads, o = attributes["kernel"], attributes["pads"], c
        include = bool(attributes["count_include_pad"])
        w_shape, has_bias = (1,), False
        # the divisor's row/column extents (pooling.py: window end clipped at the
        # padded or the plain image, start at the image with count_include_pad off)
        end_h, end_w = h + (pads[2] if include else 0), w + (pads[3] if include else 0)
        low = -max(pads) - 1 if include else 0
    else:
        w_shape = tuple(int(d) for d in task.inputs[1].shape)
        has_bias = len(task.inputs) > 2
        o, _, kh, kw = w_shape
        pads = attributes["padding"]
    top, left = pads[0], pads[1]
    mult = o // c
    lanes = target_lanes(target)
    vec = vector_type(float32, lanes) if lanes > 1 else float32
    vec_ptr = PointerType(vec)
    cp = column_phases((sh, sw), params)
    rb = rows_per_item(target, (kh, kw), (sh, sw), (dh, dw), oh, ow, float(params.get("l1", 1.0)), cp)
    u = max(1, int(params.get("unroll", 1)))
    pitch, extra = phase_geometry((kh, kw), (sh, sw), (dh, dw), ow, cp)
    blocks = -(-oh // rb)
    u = vectors_per_step(u, rb * pitch, lanes)
    step = u * lanes
    q_end = -(-(rb * pitch) // step) * step
    span = ((kh - 1) * dh // sh) * pitch + ((kw - 1) * dw) // cp
    phase_rows = rb + extra
    phase_len = max(phase_rows * pitch, q_end + span)   # every vector load stays inside
    # column v of column phase b is padded column v * cp + b; a phase row's columns:
    # [0, lo[b]) padding, [lo[b], hi[b]) copied from x, [hi[b], pitch) padding
    lo = [min(pitch, max(0, -(-(left - b) // cp))) for b in range(cp)]
    hi = [max(lo[b], min(pitch, -(-(left + w - b) // cp))) for b in range(cp)]
    # tap (i, j): (phase, offset in the phase's flat index)
    taps = [(((i * dh) % sh) * cp + (j * dw) % cp, ((i * dh) // sh) * pitch + (j * dw) // cp)
            for i in range(kh) for j in range(kw)]
    # Planes per item: small planes are grouped, so the per-item costs (hand-out, index
    # arithmetic, weights) are shared, and an item copies the tiles of all its planes
    # before it computes them: a tile's vector loads then come well after the stores
    # that wrote it (a load that overlaps stores still in the store buffer cannot be
    # forwarded and waits). 960 planes of 7x7: 41 -> 36 us single-threaded.
    group = 1 if blocks > 1 else max(1, min(o, -(-MIN_GAP // (sh * cp * phase_len))))
    groups = -(-o // group)
    item_map = spatial(n, groups, blocks)
    b_shape = (o,) if has_bias else (1,)
    plane_len = sh * cp * phase_len
    cstep = sw // cp          # tile columns per output column

    name = "avg_pool2d_cpu" if pool else "conv2d_depthwise_cpu"

    @script
    def conv2d_depthwise_cpu(x: f32[x_shape], wt: f32[w_shape], b: f32[b_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * groups * blocks, schedule="dynamic"):
            ph = local_tensor(f32, [group * plane_len])
            tile = local_tensor(f32, [q_end])
            acc = register_tensor(vec, [u])
            for ni, grp, blk in item_map.on(item):
                r0 = blk * rb
                for g in range(min(group, o - grp * group)):
                    ci = (grp * group + g) // mult
                    for a in static_range(sh):
                        for b in static_range(cp):
                            for row in range(phase_rows):
                                ih = (r0 + row) * sh + a - top
                                at = g * plane_len + (a * cp + b) * phase_len + row * pitch
                                if 0 <= ih and ih < h:
                                    for v in range(lo[b]):
                                        ph[at + v] = 0.0
                                    # element reads (gcc vectorizes the loop): a producer
                                    # of x can still be grafted onto them
                                    for v in range(lo[b], hi[b]):
                                        ph[at + v] = x[ni, ci, ih, v * cp + b - left]
                                    for v in range(hi[b], pitch):
                                        ph[at + v] = 0.0
                                else:
                                    for v in range(pitch):
                                        ph[at + v] = 0.0
                            for v in range(phase_rows * pitch, phase_len):
                                ph[g * plane_len + (a * cp + b) * phase_len + v] = 0.0
                for g in range(min(group, o - grp * group)):
                    oc = grp * group + g
                    base = g * plane_len
                    for q0 in range(0, q_end, step):
                        for k in static_range(u):
                            acc[k] = cast(0.0, vec)
                        for t in static_range(len(taps)):
                            if pool:
                                for k in static_range(u):
                                    src = base + taps[t][0] * phase_len + taps[t][1] + q0 + k * lanes
                                    acc[k] += deref(cast(address_of(ph[src]), vec_ptr))
                            else:
                                ws = wt[oc, 0, t // kw, t % kw]
                                wv = cast(ws, vec)
                                for k in static_range(u):
                                    src = base + taps[t][0] * phase_len + taps[t][1] + q0 + k * lanes
                                    acc[k] += deref(cast(address_of(ph[src]), vec_ptr)) * wv
                        for k in static_range(u):
                            tp = cast(address_of(tile[q0 + k * lanes]), vec_ptr)
                            tp[0] = acc[k]
                    if pool:
                        for rr in range(min(rb, oh - r0)):
                            h0 = (r0 + rr) * sh - top
                            rows_in = min(h0 + kh, end_h) - max(h0, low)
                            for col in range(ow):
                                w0 = col * sw - left
                                count = rows_in * (min(w0 + kw, end_w) - max(w0, low))
                                y[ni, oc, r0 + rr, col] = tile[rr * pitch + col * cstep] / cast(count, f32)
                    else:
                        bias = b[oc] if has_bias else 0.0
                        for rr in range(min(rb, oh - r0)):
                            for col in range(ow):
                                y[ni, oc, r0 + rr, col] = tile[rr * pitch + col * cstep] + bias

    if pool:
        refs = (BufferRef("input", 0), BufferRef("workspace", 0), BufferRef("workspace", 1), BufferRef("output", 0))
        workspace = (WorkspaceSpec("no_weight", "float32", (1,)), WorkspaceSpec("no_bias", "float32", (1,)))
    else:
        refs, workspace = bias_buffers(has_bias, (1,))
    return ScheduledTask(script_module(conv2d_depthwise_cpu, name=name), (Launch(name, refs),), workspace,
                         source="ops.avg_pool2d_cpu" if pool else "ops.conv2d_depthwise_cpu", params=dict(params))


class CpuDepthwiseConv2d(CpuFloat32Template):
    """float32 depthwise conv2d on the CPU (see the module docstring)."""

    name = "ops.conv2d_depthwise_cpu"
    operator = "conv2d"
    version = "2"

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        if not super().applies(task, attributes):
            return False
        return is_depthwise(tuple(task.inputs[0].shape), tuple(task.inputs[1].shape), int(attributes["groups"]))

    def space(self, target: Any, level: int) -> list[dict]:
        return depthwise_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_depthwise(task, attributes, params, target)


class CpuAvgPool2d(CpuFloat32Template):
    """float32 avg_pool2d on the CPU: the depthwise kernel with weights 1 and the
    window's count as divisor (the auto-scheduled element loop checked every tap
    against the image: 2.3 GFLOP/s on Inception-V3's 3x3 pools)."""

    name = "ops.avg_pool2d_cpu"
    operator = "avg_pool2d"
    rank = 4

    def space(self, target: Any, level: int) -> list[dict]:
        return depthwise_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_depthwise(task, attributes, params, target, pool=True)
