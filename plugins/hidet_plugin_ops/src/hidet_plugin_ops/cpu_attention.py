"""``attention`` on the CPU: one kernel, a block of R query rows at a time.

    parallel over workers w:                       (task mapping spatial(workers))
        for each of w's items (b, rows i0 .. i0+R-1) (b the flat batch index):
            qr[t, :] = q[b, i0 + t, :]                  the R query rows, on the stack
            s[t, j]  = sum_d qr[t, d] * kt[b, d, j]     d, then t, then j innermost:
                                                        kt's row d (contiguous in j, read
                                                        from L1 by the R rows) vectorizes
            s[t, j]  = scale * s[t, j] (+ mask / select), the row max; exp(s - max), the
                       row sum                          float32
            acc[t, c] = sum_j p[t, j] * v[b, j, c]      j, then t, then c innermost: v's
                                                        row j serves the R rows
            y[b, i0 + t, c] = acc[t, c]                 element stores: epilogues graft

The R rows of scores, queries and outputs are per-thread stack arrays (the template
applies while they fit in LOCAL_LIMIT), so the probabilities never go to memory and
K and V are read once per R rows. Rows past M in the last block compute row M-1 again
and are not stored. Operands are read only as elements (``q[b0, b1, i, d]``), so
fusion grafts the reshapes, transposes and scalings that lead to them onto these
loads. The space: R in BLOCKS, rows dealt in blocks or cyclically (workers from the
machine's cores); float32 statistics whatever the operands' dtype (float64 stays
float64).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Expr, cast, const, if_then_else, maximum, minimum, not_equal
from hidet_framework.ir.func import Function
from hidet_framework.ir.func import module as ir_module
from hidet_framework.ir.math_functions import exp
from hidet_framework.ir.types import TensorType
from hidet_framework.lang import attrs, local_tensor, parallel, script, script_module
from hidet_framework.mapping.task_mapping import spatial
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

from .attention import accumulator_dtype

__all__ = ["CpuAttention"]

BLOCKS = (4, 1, 8)  # query rows per work item (the space; the first is the default)
LOCAL_LIMIT = 256 * 1024  # stack bytes per thread for the rows of one item
# Stack bytes per thread for one batch entry's K and V, copied contiguous when the
# worker's batch entry changes: fusion grafts the head split and transposes onto the
# operand loads, so a key read in the inner loop was a strided gather with a dozen
# divisions (GPT-2: 74 ms a layer); the copy pays that once per entry and worker.
CACHE_LIMIT = 128 * 1024


class _Batched:
    """Element access of one operand by (flat batch index, row, column), broadcasting."""

    def __init__(self, shape: Sequence[int], batch: Sequence[int], dtype) -> None:
        self.shape, self.batch, self.dtype = tuple(shape), tuple(batch), dtype

    def index(self, b: Expr, row: Any, col: Any) -> tuple:
        lead = self.shape[:-2]
        out = []
        stride = 1
        axes = []
        for extent in reversed(self.batch):  # the flat index unravelled, last axis fastest
            axes.append((b / stride) % extent if extent > 1 else None)
            stride *= extent
        axes.reverse()
        for extent, axis in zip(lead, axes[len(axes) - len(lead):]):
            out.append(const(0, dtypes.int32) if extent == 1 or axis is None else axis)
        return (*out, row, col)

    def load(self, t, b: Expr, row: Any, col: Any, dtype) -> Expr:
        value = t[self.index(b, row, col)]
        return value if self.dtype is dtype else cast(value, dtype)


def row_functions(task: Any, a: Mapping[str, Any], batch: Sequence[int]):
    """(logit, probability): the scaled and masked score of ``(b, i, j)`` from its dot
    product, and a probability from ``exp(s - max)`` and ``1 / sum`` (NaN -> 0 under
    zero_nan), as IR; shared with the CUDA template."""
    q = task.inputs[0]
    ct = accumulator_dtype(q.dtype)
    kind = a["mask_kind"]
    mask = task.inputs[3] if kind != "none" else None
    mrank = len(mask.shape) if mask is not None else 0
    ma = _Batched(mask.shape if mrank >= 2 else (1, 1), batch, mask.dtype) if mask is not None else None
    scale, fill, zero_nan = float(a["scale"]), float(a["fill"]), bool(a["zero_nan"])
    zero = const(0, dtypes.int32)

    def mask_at(mk, b, i, j) -> Expr:
        if mrank >= 2:
            return mk[ma.index(b, i if mask.shape[-2] > 1 else zero, j if mask.shape[-1] > 1 else zero)]
        return mk[(j,)] if mrank == 1 and mask.shape[0] > 1 else mk[(zero,) * mrank]

    def logit(s_value, mk, b, i, j) -> Expr:
        value = s_value * const(scale, ct) if scale != 1.0 else s_value
        if kind == "add":
            m_value = mask_at(mk, b, i, j)
            return value + (m_value if mask.dtype is ct else cast(m_value, ct))
        if kind == "select":
            return if_then_else(mask_at(mk, b, i, j), value, const(fill, ct))
        return value

    def probability(e, inv) -> Expr:
        p = e * inv
        return if_then_else(not_equal(p, p), const(0.0, ct), p) if zero_nan else p

    return logit, probability


def kernel_operands(task: Any, a: Mapping[str, Any]):
    """What every attention kernel (this one and the CUDA forms) reads off its task:
    ``(batch, (m, n, d, dv), ct, (qt, kt_t, vt, mt, yt), (qa, ka, va, ya), (logit, probability))``
    -- the batch extents, the sizes, the accumulator dtype, the kernel's parameter types
    (the mask's is q's when there is none: the parameter is then unused), each operand's
    batched element access and the row functions."""
    q, kt, v = task.inputs[:3]
    y = task.outputs[0]
    batch = tuple(int(s) for s in a["batch"])
    sizes = tuple(int(a[k]) for k in ("m", "n", "d", "dv"))
    mask = task.inputs[3] if a["mask_kind"] != "none" else q
    types = tuple(TensorType(t.dtype, t.shape) for t in (q, kt, v, mask, y))
    access = tuple(_Batched(t.shape, batch, t.dtype) for t in (q, kt, v, y))
    return batch, sizes, accumulator_dtype(q.dtype), types, access, row_functions(task, a, batch)


def _kernel(task: Any, a: Mapping[str, Any], workers: int, order: str, block: int, name: str):
    batch, (m, n, d, dv), ct, (qt, kt_t, vt, mt, yt), (qa, ka, va, ya), (logit, probability) = kernel_operands(task, a)
    flat = 1
    for extent in batch:
        flat *= extent
    blocks = -(-m // block)  # row blocks per batch entry; the last may be partial
    items = flat * blocks
    per_worker = max(1, -(-items // workers))
    slots = spatial(workers)
    lowest = const(ct.min_value(), ct)
    zero = const(0.0, ct)
    cache = (d * n + n * dv) * (ct.bits // 8) <= CACHE_LIMIT

    @script
    def attention_rows(qx: qt, kx: kt_t, vx: vt, mk: mt, yx: yt):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(workers):
            qr = local_tensor(ct, [block * d])
            sr = local_tensor(ct, [block * n])
            ac = local_tensor(ct, [block * dv])
            inv = local_tensor(ct, [block])
            kl = local_tensor(ct, [d * n if cache else 1])  # K and V of batch entry kb[0]
            vl = local_tensor(ct, [n * dv if cache else 1])
            kb = local_tensor(dtypes.int32, [1])
            kb[0] = -1
            for slot in slots.on(w):
                for k in range(per_worker):
                    item = slot * per_worker + k if order == "block" else k * workers + slot
                    if item < items:
                        b = item / blocks
                        i0 = (item % blocks) * block
                        if cache:
                            if kb[0] != b:
                                for r in range(d):
                                    for j in range(n):
                                        kl[r * n + j] = ka.load(kx, b, r, j, ct)
                                for j in range(n):
                                    for c in range(dv):
                                        vl[j * dv + c] = va.load(vx, b, j, c, ct)
                                kb[0] = b
                        # rows past M (a partial last block) compute row M-1 again, never stored
                        for t in range(block):
                            for r in range(d):
                                qr[t * d + r] = qa.load(qx, b, minimum(i0 + t, m - 1), r, ct)
                            for j in range(n):
                                sr[t * n + j] = zero
                        for r in range(d):
                            for t in range(block):
                                qv = qr[t * d + r]
                                for j in range(n):
                                    kv = kl[r * n + j] if cache else ka.load(kx, b, r, j, ct)
                                    sr[t * n + j] = sr[t * n + j] + qv * kv
                        for t in range(block):
                            i = minimum(i0 + t, m - 1)
                            top = lowest
                            for j in range(n):
                                z = logit(sr[t * n + j], mk, b, i, j)
                                sr[t * n + j] = z
                                top = maximum(top, z)
                            total = zero
                            for j in range(n):
                                e = exp(sr[t * n + j] - top)
                                sr[t * n + j] = e
                                total = total + e
                            inv[t] = const(1.0, ct) / total
                            for c in range(dv):
                                ac[t * dv + c] = zero
                        for j in range(n):
                            for t in range(block):
                                p = probability(sr[t * n + j], inv[t])
                                for c in range(dv):
                                    vv = vl[j * dv + c] if cache else va.load(vx, b, j, c, ct)
                                    ac[t * dv + c] = ac[t * dv + c] + p * vv
                        for t in range(block):
                            if i0 + t < m:
                                for c in range(dv):
                                    yx[ya.index(b, i0 + t, c)] = cast(ac[t * dv + c], yt.dtype)

    return attention_rows


class CpuAttention(Template):
    """``attention`` on the CPU (module docstring)."""

    name = "ops.attention_cpu"
    operator = "attention"
    target = "cpu"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        sizes = [int(attributes[k]) for k in ("m", "n", "d", "dv")] + [int(s) for s in attributes["batch"]]
        # the per-thread rows live on the stack: at most LOCAL_LIMIT bytes for the largest block
        width = accumulator_dtype(task.inputs[0].dtype).bits // 8
        rows = max(BLOCKS)
        local = rows * (int(attributes["n"]) + int(attributes["d"]) + int(attributes["dv"]) + 1) * width
        return min(sizes) > 0 and local <= LOCAL_LIMIT

    def space(self, target: Any, level: int) -> list[dict]:
        workers = max(1, int(target.get("cores", 1)))
        out = [{"workers": workers, "order": "block", "rows": BLOCKS[0]}]
        if level == 0:
            return out
        return out + [{"workers": workers, "order": o, "rows": r} for r in BLOCKS for o in ("block", "cyclic")
                      if {"workers": workers, "order": o, "rows": r} not in out]

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        workers, order, rows = int(params["workers"]), str(params["order"]), int(params["rows"])
        name = "ops_attention_cpu"
        fn = _kernel(task, attributes, workers, order, rows, name)
        buffers = tuple(BufferRef("input", k) for k in range(4)) + (BufferRef("output", 0),)
        if attributes["mask_kind"] != "none":
            module = script_module(fn, name=name)
        else:  # the mask parameter is unused: dropped, so no buffer is bound twice
            ir = fn.ir
            module = ir_module(name, [Function(ir.name, [p for k, p in enumerate(ir.params) if k != 3], ir.body, ir.kind,
                                               ir.ret_type, ir.attrs)])
            buffers = buffers[:3] + buffers[4:]
        return ScheduledTask(module, (Launch(name, buffers),), (), source=self.name, params=dict(params))
