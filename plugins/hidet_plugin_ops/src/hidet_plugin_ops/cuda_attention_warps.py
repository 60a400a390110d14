"""``attention`` on CUDA, the per-row form for keys stored D-fastest (opt-in: built only
for the explicit parameters ``{"rows": 1, "k_order": "d"}``, in no tuning space and no
default; this unrolled version has not run on a GPU yet: its first version, one key at a
time, measured 20 us / 22 us a call on BERT / GPT-2's attention, no better than the
tiled form, docs/perf_notes.md). One block per
query row (b, i) of T threads, as cuda_attention.py's per-row form, but the scores are
taken a key per warp:

    s[j] = logit(sum_d qs[d] * kt[b, d, j])   warp w takes keys j = w, w + T/32, ...; its
                                               lanes split D (the key's row is contiguous
                                               when K^T is an exported transpose: one
                                               coalesced load a lane pair), butterfly sum
    max, exp, sum over the row                 threads over j, as the per-row form
    y[b, i, c] = sum_j p_j v[b, j, c]          G = T / Dv groups of Dv threads: group g
                                               sums keys j = g, g + G, ... (v read along
                                               c), the groups added through shared memory

The row of scores stays in shared memory; operands are read and the output written only
as elements (fusion grafts the head split and merge onto them); every index is clamped
under its guard (``min(j, N - 1)``) so the grafted index arithmetic simplifies.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hidet_framework.ir.expr import cast, const, maximum, minimum
from hidet_framework.ir.math_functions import exp
from hidet_framework.ir.stmt import AssignStmt, BufferStoreStmt, EvaluateStmt, IfStmt, seq
from hidet_framework.lang import attrs, script, shared_tensor, static_range, unroll

from .cpu_attention import kernel_operands

__all__ = ["warp_kernel", "block_reduce"]

UNROLL = 8  # keys in flight per warp (scores) and per thread group (P @ V)


def block_reduce(value: Any, kind: str, red: Any, slot: int, lane_zero: Any, tid: Any, warps: int):
    """The statements that make `value` (a script variable: each thread's partial) the
    block's maximum (`kind` "max") or sum ("sum"): a butterfly over the warp's lanes, lane
    0 (`lane_zero`, its condition) stores the warp's result in ``red[slot, warp]``, and
    after a barrier every thread folds the warps' results in order. Both per-row forms
    (this one and cuda_attention.py's) reduce their row's maximum and sum so."""
    from hidet_plugin_cuda.lang import FULL_MASK, shfl_xor_sync, syncthreads

    def combine(x, y):
        return maximum(x, y) if kind == "max" else x + y

    out = [AssignStmt(value, combine(value, shfl_xor_sync(FULL_MASK, value, 16 >> s))) for s in range(5)]
    out += [IfStmt(lane_zero, BufferStoreStmt(red, (slot, tid / 32), value), None), EvaluateStmt(syncthreads()),
            AssignStmt(value, red[slot, 0])]
    out += [AssignStmt(value, combine(value, red[slot, w])) for w in range(1, warps)]
    return seq(*out)


def warp_kernel(task: Any, a: Mapping[str, Any], threads: int, name: str):
    """The per-row form for keys stored D-fastest (``k_order`` "d"): warp w takes keys
    j = w, w + W, ... and its lanes split the dot product over D (coalesced K rows,
    butterfly sum); the probabilities times V with the threads in G = T / Dv groups of
    Dv columns, group g summing keys j = g, g + G, ..., the groups added in shared."""
    from hidet_plugin_cuda.lang import FULL_MASK, blockIdx, shfl_xor_sync, syncthreads, threadIdx

    batch, (m, n, d, dv), ct, (qt, ktt, vt, mt, yt), (qa, ka, va, ya), (logit, probability) = kernel_operands(task, a)
    warps, groups = threads // 32, max(1, threads // dv)
    levels = [16 >> s for s in range(5)]
    lowest, zero = const(ct.min_value(), ct), const(0.0, ct)

    @script
    def attention_warps_cuda(qx: qt, kx: ktt, vx: vt, mk: mt, yx: yt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = math.prod(batch) * m
        attrs.cuda.block_dim = threads
        qs = shared_tensor(ct, [d])
        srow = shared_tensor(ct, [n])
        red = shared_tensor(ct, [2, warps])
        part = shared_tensor(ct, [groups, dv])
        b = blockIdx.x / m
        i = blockIdx.x % m
        tid = threadIdx.x
        lane = tid % 32
        for r in range(tid, d, threads):
            qs[r] = qa.load(qx, b, i, minimum(r, d - 1), ct)
        syncthreads()
        for j0 in range(-(-n // (warps * UNROLL))):
            for u in unroll(UNROLL):  # UNROLL independent keys a warp: their loads overlap
                j = (j0 * UNROLL + u) * warps + tid / 32
                if j < n:
                    s = zero
                    for rk in unroll(-(-d // 32)):
                        if rk * 32 + lane < d:
                            s = s + qs[rk * 32 + lane] * ka.load(kx, b, minimum(rk * 32 + lane, d - 1),
                                                                 minimum(j, n - 1), ct)
                    for lv in static_range(5):
                        s = s + shfl_xor_sync(FULL_MASK, s, levels[lv])
                    if lane == 0:
                        srow[j] = logit(s, mk, b, i, minimum(j, n - 1))
        syncthreads()
        top = lowest
        for j in range(tid, n, threads):
            top = maximum(top, srow[j])
        block_reduce(top, "max", red, 0, lane == 0, tid, warps)
        total = zero
        for j in range(tid, n, threads):
            e = exp(srow[j] - top)
            srow[j] = e
            total = total + e
        block_reduce(total, "sum", red, 1, lane == 0, tid, warps)
        inv = const(1.0, ct) / total
        if groups > 1:
            if tid < groups * dv:
                acc = zero
                for jp0 in range(-(-n // (groups * UNROLL))):
                    for up in unroll(UNROLL):
                        jp = (jp0 * UNROLL + up) * groups + tid / dv
                        if jp < n:
                            acc = acc + probability(srow[jp], inv) * va.load(vx, b, minimum(jp, n - 1), tid % dv, ct)
                part[tid / dv, tid % dv] = acc
            syncthreads()
            for c in range(tid, dv, threads):
                acc = part[0, c]
                for g in static_range(1, groups):
                    acc = acc + part[g, c]
                yx[ya.index(b, i, minimum(c, dv - 1))] = cast(acc, yt.dtype)
        else:
            for c in range(tid, dv, threads):
                acc = zero
                for j in range(n):
                    acc = acc + probability(srow[j], inv) * va.load(vx, b, j, minimum(c, dv - 1), ct)
                yx[ya.index(b, i, minimum(c, dv - 1))] = cast(acc, yt.dtype)

    return attention_warps_cuda
