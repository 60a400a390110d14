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

With float32 statistics and K and V copied (the usual case), both products run on
register tiles of GCC vectors (`_tile_functions`): R rows x nv vectors of accumulators,
one vector of K (or V) loaded per nv and broadcast against the R query values (or
probabilities), so each loaded vector serves R FMAs and the partial sums never go
through memory; the columns past the last whole vector take the scalar loops above.
nv comes from the machine's register file and vector width. The probabilities are
then computed once into the score rows before the second product.

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
from hidet_framework.ir.dtypes import vector_type
from hidet_framework.ir.expr import Expr, cast, const, if_then_else, maximum, minimum, not_equal
from hidet_framework.ir.func import Function
from hidet_framework.ir.func import module as ir_module
from hidet_framework.ir.math_functions import exp
from hidet_framework.ir.types import PointerType, TensorType
from hidet_framework.lang import (
    address_of, attrs, deref, f32, i32, local_tensor, parallel, register_tensor, script, script_module, static_range,
)
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


def _tile_width(lanes: int, registers: int, block: int, columns: int) -> int:
    """Vectors per register tile: ``block * nv`` accumulators, nv loaded vectors and a
    broadcast fit the register file; at most the columns' whole vectors, at most 8."""
    return max(0, min(8, (registers - 1) // (block + 1), columns // lanes))


def _tile_functions(name: str, block: int, n: int, d: int, dv: int, lanes: int, nv: int, kind: str):
    """A device function computing ``nv * lanes`` columns of the R rows' products from
    column ``col0``: ``kind`` "qk": ``sr[t, j] = sum_r qr[t, r] * kl[r, j]``; "pv":
    ``ac[t, c] = sum_j sr[t, j] * vl[j, c]`` (sr holding probabilities)."""
    vec = vector_type(dtypes.float32, lanes)
    vec_ptr = PointerType(vec)
    inner, width, reduce = (d, n, d) if kind == "qk" else (n, dv, n)  # a row's length, a column's stride

    @script
    def attention_tile(lhs: f32[block * inner], rhs: f32[reduce * width], out: f32[block * width], col0: i32):
        attrs.func_kind = "device"
        attrs.func_name = f"{name}_{kind}_tile{nv}"
        acc = register_tensor(vec, [block, nv])
        rv = register_tensor(vec, [nv])
        for t in static_range(block):
            for v in static_range(nv):
                acc[t, v] = cast(0.0, vec)
        for r in range(reduce):
            for v in static_range(nv):
                rv[v] = deref(cast(address_of(rhs[r * width + col0 + v * lanes]), vec_ptr))
            for t in static_range(block):
                x = lhs[t * inner + r]
                for v in static_range(nv):
                    acc[t, v] += cast(x, vec) * rv[v]
        for t in static_range(block):
            for v in static_range(nv):
                op = cast(address_of(out[t * width + col0 + v * lanes]), vec_ptr)
                op[0] = acc[t, v]

    return attention_tile


def _column_plan(name: str, block: int, n: int, d: int, dv: int, lanes: int, registers: int, kind: str):
    """(calls, tail start): the tile functions covering a product's columns from 0 (a
    widest tile repeated, then one narrower tile for the whole vectors left) and where
    the scalar loop takes over."""
    columns = n if kind == "qk" else dv
    nv = _tile_width(lanes, registers, block, columns)
    if nv == 0:
        return [], 0
    widest = _tile_functions(name, block, n, d, dv, lanes, nv, kind)
    calls = [(widest, k * nv * lanes) for k in range(columns // (nv * lanes))]
    done = len(calls) * nv * lanes
    rest = (columns - done) // lanes
    if rest:  # fewer than nv vectors: never the widest tile's name
        calls.append((_tile_functions(name, block, n, d, dv, lanes, rest, kind), done))
        done += rest * lanes
    return calls, done


def _kernel(task: Any, a: Mapping[str, Any], workers: int, order: str, block: int, name: str,
            lanes: int = 1, registers: int = 16):
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
    tiled = cache and ct is dtypes.float32 and lanes > 1
    qk_calls, qk_tail = _column_plan(name, block, n, d, dv, lanes, registers, "qk") if tiled else ([], 0)
    pv_calls, pv_tail = _column_plan(name, block, n, d, dv, lanes, registers, "pv") if tiled else ([], 0)
    # With 512-bit vectors the row's max tree and its exp-and-sum are the cpu plugin's vector
    # helpers (hidet_row_max_f32, hidet_exp_sum_f32: own exp, -inf and NaN right); with
    # narrower ones libm's expf over lane accumulators (the helpers measured slower there).
    own_math = tiled and lanes >= 16
    if own_math:
        from hidet_plugin_cpu.primitives import ROW_LANES, exp_sum, row_max

        own_math = lanes in ROW_LANES
    lane_halves = [lanes >> k for k in range(1, lanes.bit_length())] if tiled else []  # lanes/2, ..., 1

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
            part = local_tensor(ct, [lanes if tiled else 1])  # a row's lane accumulators
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
                        if tiled:
                            for tile_fn, col0 in qk_calls:
                                tile_fn(qr, kl, sr, col0)
                            if qk_tail < n:
                                for r in range(d):
                                    for t in range(block):
                                        qv = qr[t * d + r]
                                        for jj in range(n - qk_tail):
                                            sr[t * n + qk_tail + jj] = sr[t * n + qk_tail + jj] + qv * kl[r * n + qk_tail + jj]
                        else:
                            for r in range(d):
                                for t in range(block):
                                    qv = qr[t * d + r]
                                    for j in range(n):
                                        kv = kl[r * n + j] if cache else ka.load(kx, b, r, j, ct)
                                        sr[t * n + j] = sr[t * n + j] + qv * kv
                        for t in range(block):
                            i = minimum(i0 + t, m - 1)
                            if tiled:  # lane accumulators: gcc vectorizes what a float chain would keep scalar
                                for j in range(lanes):
                                    part[j] = lowest
                                for jb in range(n // lanes):
                                    for j in range(lanes):
                                        z = logit(sr[t * n + jb * lanes + j], mk, b, i, jb * lanes + j)
                                        sr[t * n + jb * lanes + j] = z
                                        part[j] = maximum(z, part[j])   # the new value first (NaN test off the chain)
                                for jj in range(n % lanes):
                                    z = logit(sr[t * n + n - n % lanes + jj], mk, b, i, n - n % lanes + jj)
                                    sr[t * n + n - n % lanes + jj] = z
                                    part[0] = maximum(z, part[0])
                                if own_math:
                                    top = row_max(address_of(part[0]), lanes)
                                    total = exp_sum(address_of(sr[t * n]), top, n)
                                else:
                                    for h in lane_halves:
                                        for j in range(h):
                                            part[j] = maximum(part[j], part[j + h])
                                    top = part[0]
                                    for j in range(lanes):
                                        part[j] = zero
                                    for jb in range(n // lanes):
                                        for j in range(lanes):
                                            e = exp(sr[t * n + jb * lanes + j] - top)
                                            sr[t * n + jb * lanes + j] = e
                                            part[j] = part[j] + e
                                    for jj in range(n % lanes):
                                        e = exp(sr[t * n + n - n % lanes + jj] - top)
                                        sr[t * n + n - n % lanes + jj] = e
                                        part[0] = part[0] + e
                                    for h in lane_halves:
                                        for j in range(h):
                                            part[j] = part[j] + part[j + h]
                                    total = part[0]
                                inv[t] = const(1.0, ct) / total
                                for j in range(n):  # the probabilities, once, for the second product's tiles
                                    sr[t * n + j] = probability(sr[t * n + j], inv[t])
                            else:
                                top = lowest
                                for j in range(n):
                                    z = logit(sr[t * n + j], mk, b, i, j)
                                    sr[t * n + j] = z
                                    top = maximum(z, top)
                                total = zero
                                for j in range(n):
                                    e = exp(sr[t * n + j] - top)
                                    sr[t * n + j] = e
                                    total = total + e
                                inv[t] = const(1.0, ct) / total
                            for c in range(dv):
                                ac[t * dv + c] = zero
                        if tiled:
                            for tile_fn, col0 in pv_calls:
                                tile_fn(sr, vl, ac, col0)
                            if pv_tail < dv:
                                for j in range(n):
                                    for t in range(block):
                                        p = sr[t * n + j]
                                        for cc in range(dv - pv_tail):
                                            ac[t * dv + pv_tail + cc] = ac[t * dv + pv_tail + cc] + p * vl[j * dv + pv_tail + cc]
                        else:
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
    version = "2"
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
        vector_bits = int(target.get("vector_bits", 0))
        fn = _kernel(task, attributes, workers, order, rows, name, lanes=max(1, vector_bits // 32),
                     registers=32 if vector_bits >= 512 else 16)
        buffers = tuple(BufferRef("input", k) for k in range(4)) + (BufferRef("output", 0),)
        module = script_module(fn, name=name)
        if attributes["mask_kind"] == "none":  # the mask parameter is unused: dropped, so no buffer is bound twice
            ir = fn.ir
            kernel = Function(ir.name, [p for k, p in enumerate(ir.params) if k != 3], ir.body, ir.kind, ir.ret_type,
                              ir.attrs)
            module = ir_module(name, [kernel if f.name == ir.name else f for f in module.functions.values()])
            buffers = buffers[:3] + buffers[4:]
        return ScheduledTask(module, (Launch(name, buffers),), (), source=self.name, params=dict(params))
