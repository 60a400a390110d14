"""``attention`` on the CPU: one kernel, one query row at a time.

    parallel over workers w:                      (task mapping spatial(workers))
        for each of w's rows (b, i) of the scores (b the flat batch index):
            s[j]  = sum_d q[b, i, d] * kt[b, d, j]     d outer, j inner: contiguous in
                                                       kt's last axis, so it vectorizes
            s[j]  = scale * s[j] (+ mask / select)     and the row maximum, in float32
            s[j]  = exp(s[j] - max); sum               float32
            acc[c] = sum_j p_j * v[b, j, c]            p_j = s[j] / sum (0 for a NaN
                                                       with zero_nan); c inner
            y[b, i, c] = acc[c]                        element stores: epilogues graft

The scores row and the output row live in per-worker workspaces (``[workers * N]`` and
``[workers * Dv]`` float32), so the probabilities never go to memory and nothing in
the kernel grows with M or the batch. Operands are read only as elements
(``q[b0, b1, i, d]``), so fusion grafts the reshapes, transposes and scalings that lead
to them (the head split of BERT and GPT-2) onto these loads. The space is the row
order only (workers from the machine's cores); float32 statistics whatever the
operands' dtype (float64 stays float64).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Expr, cast, const, if_then_else, maximum, not_equal
from hidet_framework.ir.func import Function
from hidet_framework.ir.func import module as ir_module
from hidet_framework.ir.math_functions import exp
from hidet_framework.ir.types import TensorType
from hidet_framework.lang import attrs, parallel, script, script_module
from hidet_framework.mapping.task_mapping import spatial
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

from .attention import accumulator_dtype

__all__ = ["CpuAttention"]


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


def _kernel(task: Any, a: Mapping[str, Any], workers: int, order: str, name: str):
    has_mask = a["mask_kind"] != "none"
    q, kt, v = task.inputs[:3]
    y = task.outputs[0]
    batch = tuple(int(s) for s in a["batch"])
    m, n, d, dv = (int(a[k]) for k in ("m", "n", "d", "dv"))
    flat = 1
    for extent in batch:
        flat *= extent
    rows = flat * m
    per_worker = max(1, -(-rows // workers))
    slots = spatial(workers)
    ct = accumulator_dtype(q.dtype)
    mask = task.inputs[3] if has_mask else None
    types = [TensorType(t.dtype, t.shape) for t in (q, kt, v, mask if has_mask else q, y)]
    qa, ka, va, ya = (_Batched(t.shape, batch, t.dtype) for t in (q, kt, v, y))
    logit, probability = row_functions(task, a, batch)
    lowest = const(ct.min_value(), ct)

    qt, kt_t, vt, mt, yt = types
    wt_s, wt_acc = TensorType(ct, (workers * n,)), TensorType(ct, (workers * dv,))

    @script
    def attention_rows(qx: qt, kx: kt_t, vx: vt, mk: mt, yx: yt, srow: wt_s, acc: wt_acc):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(workers):
            for slot in slots.on(w):
                for k in range(per_worker):
                    row = slot * per_worker + k if order == "block" else k * workers + slot
                    if row < rows:
                        b = row / m
                        i = row % m
                        sb = w * n
                        ab = w * dv
                        for j in range(n):
                            srow[sb + j] = const(0.0, ct)
                        for r in range(d):
                            qv = qa.load(qx, b, i, r, ct)
                            for j in range(n):
                                srow[sb + j] = srow[sb + j] + qv * ka.load(kx, b, r, j, ct)
                        top = lowest
                        for j in range(n):
                            z = logit(srow[sb + j], mk, b, i, j)
                            srow[sb + j] = z
                            top = maximum(top, z)
                        total = const(0.0, ct)
                        for j in range(n):
                            e = exp(srow[sb + j] - top)
                            srow[sb + j] = e
                            total = total + e
                        inv = const(1.0, ct) / total
                        for c in range(dv):
                            acc[ab + c] = const(0.0, ct)
                        for j in range(n):
                            p = probability(srow[sb + j], inv)
                            for c in range(dv):
                                acc[ab + c] = acc[ab + c] + p * va.load(vx, b, j, c, ct)
                        for c in range(dv):
                            yx[ya.index(b, i, c)] = cast(acc[ab + c], y.dtype)

    return attention_rows


class CpuAttention(Template):
    """``attention`` on the CPU (module docstring)."""

    name = "ops.attention_cpu"
    operator = "attention"
    target = "cpu"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return all(int(attributes[k]) > 0 for k in ("m", "n", "d", "dv")) and all(int(s) > 0 for s in attributes["batch"])

    def space(self, target: Any, level: int) -> list[dict]:
        workers = max(1, int(target.get("cores", 1)))
        out = [{"workers": workers, "order": "block"}]
        return out if level == 0 else out + [{"workers": workers, "order": "cyclic"}]

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        workers, order = int(params["workers"]), str(params["order"])
        name = "ops_attention_cpu"
        fn = _kernel(task, attributes, workers, order, name)
        ct = accumulator_dtype(task.inputs[0].dtype)
        n, dv = int(attributes["n"]), int(attributes["dv"])
        has_mask = attributes["mask_kind"] != "none"
        workspace = (WorkspaceSpec("score_rows", ct.name, (workers * n,)),
                     WorkspaceSpec("output_rows", ct.name, (workers * dv,)))
        buffers = (BufferRef("input", 0), BufferRef("input", 1), BufferRef("input", 2), BufferRef("input", 3),
                   BufferRef("output", 0), BufferRef("workspace", 0), BufferRef("workspace", 1))
        if has_mask:
            module = script_module(fn, name=name)
        else:  # the mask parameter is unused: dropped, so no buffer is bound twice
            ir = fn.ir
            module = ir_module(name, [Function(ir.name, [p for k, p in enumerate(ir.params) if k != 3], ir.body, ir.kind,
                                               ir.ret_type, ir.attrs)])
            buffers = buffers[:3] + buffers[4:]
        return ScheduledTask(module, (Launch(name, buffers),), workspace, source=self.name, params=dict(params))
