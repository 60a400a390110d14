"""``attention`` on CUDA: one kernel, one thread block per query row.

    block (b, i) of T threads (b the flat batch index, one block per row of the scores):
        qs[d]   = q[b, i, d]                         the query row, in shared memory
        s[j]    = scale * sum_d qs[d] * kt[b, d, j]  thread t takes j = t, t + T, ...
                  (+ mask / select); its maximum     (kt read along j: coalesced)
        max     = the block's maximum                butterfly shuffles in each warp,
                                                     then the warps' through shared memory
        s[j]    = exp(s[j] - max); the block's sum   float32, the same way
        y[b, i, c] = sum_j p_j * v[b, j, c]          thread t takes c = t, t + T, ...
                                                     (v read along c: coalesced);
                                                     p_j = s[j] / sum (0 for a NaN under
                                                     zero_nan), element stores

The scores row stays in shared memory (``N + D`` floats: the template applies while
that fits in 48 KiB), so the probabilities never go to global memory. Operands are
read and the output written only as elements, so fusion grafts the head split and
merge (reshapes, transposes, scalings) onto them. Statistics are float32 (float64 for
float64 operands). The space is the block size (``T`` in 128, 256, 64, 32).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast, const, maximum
from hidet_framework.ir.func import Function
from hidet_framework.ir.func import module as ir_module
from hidet_framework.ir.math_functions import exp
from hidet_framework.ir.types import TensorType
from hidet_framework.lang import attrs, script, shared_tensor, static_range
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

from .attention import accumulator_dtype
from .cpu_attention import _Batched, row_functions

__all__ = ["CudaAttention"]

SHARED_LIMIT = 48 * 1024


def _kernel(task: Any, a: Mapping[str, Any], threads: int, name: str):
    from hidet_plugin_cuda.lang import FULL_MASK, blockIdx, shfl_xor_sync, syncthreads, threadIdx

    q, kt, v = task.inputs[:3]
    y = task.outputs[0]
    batch = tuple(int(s) for s in a["batch"])
    m, n, d, dv = (int(a[k]) for k in ("m", "n", "d", "dv"))
    rows = math.prod(batch) * m
    ct = accumulator_dtype(q.dtype)
    has_mask = a["mask_kind"] != "none"
    mask = task.inputs[3] if has_mask else q
    qt, ktt, vt, mt, yt = (TensorType(t.dtype, t.shape) for t in (q, kt, v, mask, y))
    qa, ka, va, ya = (_Batched(t.shape, batch, t.dtype) for t in (q, kt, v, y))
    logit, probability = row_functions(task, a, batch)
    warps = threads // 32
    levels = [16 >> s for s in range(5)]
    lowest = const(ct.min_value(), ct)
    n_chunks, d_chunks, dv_chunks = -(-n // threads), -(-d // threads), -(-dv // threads)

    @script
    def attention_rows_cuda(qx: qt, kx: ktt, vx: vt, mk: mt, yx: yt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = rows
        attrs.cuda.block_dim = threads
        qs = shared_tensor(ct, [d])
        srow = shared_tensor(ct, [n])
        red = shared_tensor(ct, [2, warps])
        row = blockIdx.x
        b = row / m
        i = row % m
        tid = threadIdx.x
        for k in range(d_chunks):
            r = k * threads + tid
            if r < d:
                qs[r] = qa.load(qx, b, i, r, ct)
        syncthreads()
        top = lowest
        for k in range(n_chunks):
            j = k * threads + tid
            if j < n:
                s = const(0.0, ct)
                for r in range(d):
                    s = s + qs[r] * ka.load(kx, b, r, j, ct)
                z = logit(s, mk, b, i, j)
                srow[j] = z
                top = maximum(top, z)
        for lv in static_range(5):
            top = maximum(top, shfl_xor_sync(FULL_MASK, top, levels[lv]))
        if tid % 32 == 0:
            red[0, tid / 32] = top
        syncthreads()
        top = red[0, 0]
        for w in static_range(1, warps):
            top = maximum(top, red[0, w])
        total = const(0.0, ct)
        for k in range(n_chunks):
            j = k * threads + tid
            if j < n:
                e = exp(srow[j] - top)
                srow[j] = e
                total = total + e
        for lv in static_range(5):
            total = total + shfl_xor_sync(FULL_MASK, total, levels[lv])
        if tid % 32 == 0:
            red[1, tid / 32] = total
        syncthreads()
        total = red[1, 0]
        for w in static_range(1, warps):
            total = total + red[1, w]
        inv = const(1.0, ct) / total
        for k in range(dv_chunks):
            c = k * threads + tid
            if c < dv:
                acc = const(0.0, ct)
                for j in range(n):
                    acc = acc + probability(srow[j], inv) * va.load(vx, b, j, c, ct)
                yx[ya.index(b, i, c)] = cast(acc, y.dtype)

    return attention_rows_cuda


class CudaAttention(Template):
    """``attention`` on CUDA (module docstring)."""

    name = "ops.attention_cuda"
    operator = "attention"
    target = "cuda"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        sizes = [int(attributes[k]) for k in ("m", "n", "d", "dv")] + [int(s) for s in attributes["batch"]]
        if min(sizes) <= 0:
            return False
        width = accumulator_dtype(task.inputs[0].dtype).bits // 8
        return (int(attributes["n"]) + int(attributes["d"]) + 2 * 8) * width <= SHARED_LIMIT

    def space(self, target: Any, level: int) -> list[dict]:
        out = [{"threads": 128}]
        return out if level == 0 else out + [{"threads": t} for t in (256, 64, 32)]

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        name = "ops_attention_cuda"
        fn = _kernel(task, attributes, int(params["threads"]), name)
        buffers = tuple(BufferRef("input", k) for k in range(4)) + (BufferRef("output", 0),)
        if attributes["mask_kind"] != "none":
            module = ir_module(name, [fn.ir])
        else:  # the mask parameter is unused: dropped, so no buffer is bound twice
            ir = fn.ir
            module = ir_module(name, [Function(ir.name, [p for k, p in enumerate(ir.params) if k != 3], ir.body, ir.kind,
                                               ir.ret_type, ir.attrs)])
            buffers = buffers[:3] + buffers[4:]
        return ScheduledTask(module, (Launch(name, buffers),), (), source=self.name, params=dict(params))
