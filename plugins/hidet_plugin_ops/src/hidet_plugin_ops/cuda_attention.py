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
float64 operands).

The tiled form (``rows`` = R > 1) gives a block R query rows of one batch entry, so
every key and value element is loaded (through whatever the graft put in front of
it: GPT-2's head split costs dozens of integer operations an element) once per R
rows instead of once per row:

    block (b, rows i0 .. i0+R-1) of T threads:
        qs[r, :]   = q[b, i0 + r, :]                  shared; rows past M repeat row M-1
        for each chunk of C keys j0 .. j0+C-1:
            ks[:, jj] = kt[b, :, j0 + jj]             shared (0 past N); threads walk D
                                                      fastest (`k_order` "d": the exported
                                                      K^T is a transpose) or C ("j")
            s[r, j0 + jj] = logit(qs[r, :] . ks[:, jj])   thread e takes (r, jj) = e
        warp w: rows w, w + T/32, ...: the row's max, exp, sum, p = probability
        for each chunk: vs[jj, :] = v[b, j0 + jj, :]; ys[r, c] += sum_jj p[r, j0+jj] vs[jj, c]
        y[b, i0 + r, c] = ys[r, c]                    rows < M only; element stores

Every thread keeps the same (r, c) outputs through all chunks, so ``ys`` needs no
barrier of its own. The space: the per-row form with ``T`` in 128, 256, 64, 32, and
the tiled one with R in ROW_TILES and T in 128, 256. Level 0 (``auto_form``): the
per-row form for a stored K of a short sequence whose rows fill the GPU, else the tiled
form with the largest R that still gives every SM a block (from the target's SM
count). A per-row form that gives each key to a warp (``rows`` 1, ``k_order`` "d",
cuda_attention_warps.py) is built only when asked for explicitly: it is in no space
and no default (not yet run on a GPU in its current form). The tensor-core form
(``{"form": "mma"}``, cuda_attention_mma.py: float16 / bfloat16, D and Dv multiples of
16 up to 128) is level 0's choice and leads the spaces; tasks it does not apply to
(float32, other D) get the scalar forms above for it, and HIDET_FRAMEWORK_ATTENTION_MMA=0
takes it out (level 0 and the spaces as without it). The split form (``{"form": "mma",
"warps": W, "split": S}``, cuda_attention_split.py: the keys split over a block's warps,
16-row blocks for short sequences) is level 0's pick and in the spaces where the mma form
applies; HIDET_FRAMEWORK_ATTENTION_SPLIT=0 takes it out.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast, const, maximum, minimum
from hidet_framework.ir.func import Function
from hidet_framework.ir.func import module as ir_module
from hidet_framework.ir.math_functions import exp
from hidet_framework.lang import attrs, script, shared_tensor, static_range
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

from .attention import accumulator_dtype
from .cpu_attention import kernel_operands
from .cuda_attention_mma import eligible, enabled, mma_kernel
from . import cuda_attention_split as split_form
from .cuda_attention_warps import block_reduce, warp_kernel

__all__ = ["CudaAttention"]

SHARED_LIMIT = 48 * 1024
ROW_TILES = (16, 8, 4, 2)  # query rows per block of the tiled form
CHUNK = 32  # keys per shared tile of the tiled form


def _kernel(task: Any, a: Mapping[str, Any], threads: int, name: str):
    from hidet_plugin_cuda.lang import blockIdx, syncthreads, threadIdx

    batch, (m, n, d, dv), ct, (qt, ktt, vt, mt, yt), (qa, ka, va, ya), (logit, probability) = kernel_operands(task, a)
    rows = math.prod(batch) * m
    warps = threads // 32
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
        block_reduce(top, "max", red, 0, tid % 32 == 0, tid, warps)
        total = const(0.0, ct)
        for k in range(n_chunks):
            j = k * threads + tid
            if j < n:
                e = exp(srow[j] - top)
                srow[j] = e
                total = total + e
        block_reduce(total, "sum", red, 1, tid % 32 == 0, tid, warps)
        inv = const(1.0, ct) / total
        for k in range(dv_chunks):
            c = k * threads + tid
            if c < dv:
                acc = const(0.0, ct)
                for j in range(n):
                    acc = acc + probability(srow[j], inv) * va.load(vx, b, j, c, ct)
                yx[ya.index(b, i, c)] = cast(acc, yt.dtype)

    return attention_rows_cuda


def _tiled_shared_bytes(a: Mapping[str, Any], rows: int, width: int) -> int:
    n, d, dv = (int(a[k]) for k in ("n", "d", "dv"))
    npad = -(-n // CHUNK) * CHUNK
    return (rows * d + d * (CHUNK + 1) + CHUNK * dv + rows * npad + rows * dv) * width


def _tiled_kernel(task: Any, a: Mapping[str, Any], threads: int, rows: int, k_order: str, name: str):
    from hidet_plugin_cuda.lang import FULL_MASK, blockIdx, shfl_xor_sync, syncthreads, threadIdx

    batch, (m, n, d, dv), ct, (qt, ktt, vt, mt, yt), (qa, ka, va, ya), (logit, probability) = kernel_operands(task, a)
    warps = threads // 32
    levels = [16 >> s for s in range(5)]
    lowest, zero = const(ct.min_value(), ct), const(0.0, ct)
    row_blocks, chunks = -(-m // rows), -(-n // CHUNK)
    npad = chunks * CHUNK

    @script
    def attention_tiles_cuda(qx: qt, kx: ktt, vx: vt, mk: mt, yx: yt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = math.prod(batch) * row_blocks
        attrs.cuda.block_dim = threads
        qs = shared_tensor(ct, [rows, d])
        ks = shared_tensor(ct, [d, CHUNK + 1])  # + 1: "d" order stores down a column
        vs = shared_tensor(ct, [CHUNK, dv])
        srow = shared_tensor(ct, [rows, npad])
        ys = shared_tensor(ct, [rows, dv])
        b = blockIdx.x / row_blocks
        i0 = blockIdx.x % row_blocks * rows
        tid = threadIdx.x
        lane = tid % 32
        for e in range(tid, rows * d, threads):
            qs[e / d, e % d] = qa.load(qx, b, minimum(i0 + e / d, m - 1), e % d, ct)
        for e in range(tid, rows * dv, threads):
            ys[e / dv, e % dv] = zero
        for c0 in range(chunks):
            syncthreads()  # the previous chunk's readers of ks are done
            for e in range(tid, d * CHUNK, threads):
                r = e % d if k_order == "d" else e / CHUNK
                jj = e / d if k_order == "d" else e % CHUNK
                if c0 * CHUNK + jj < n:
                    ks[r, jj] = ka.load(kx, b, r, minimum(c0 * CHUNK + jj, n - 1), ct)
                else:
                    ks[r, jj] = zero
            syncthreads()
            for e in range(tid, rows * CHUNK, threads):
                r = e / CHUNK
                jj = e % CHUNK
                s = zero
                for c in range(d):
                    s = s + qs[r, c] * ks[c, jj]
                if c0 * CHUNK + jj < n:
                    srow[r, c0 * CHUNK + jj] = logit(s, mk, b, minimum(i0 + r, m - 1), c0 * CHUNK + jj)
                else:
                    srow[r, c0 * CHUNK + jj] = zero  # a probability of 0 for the padding keys
        syncthreads()
        for r in range(tid / 32, rows, warps):  # one warp a row: the shuffles stay warp-uniform
            top = lowest
            for j in range(lane, n, 32):
                top = maximum(top, srow[r, j])
            for lv in static_range(5):
                top = maximum(top, shfl_xor_sync(FULL_MASK, top, levels[lv]))
            total = zero
            for j in range(lane, n, 32):
                ex = exp(srow[r, j] - top)
                srow[r, j] = ex
                total = total + ex
            for lv in static_range(5):
                total = total + shfl_xor_sync(FULL_MASK, total, levels[lv])
            inv = const(1.0, ct) / total
            for j in range(lane, n, 32):
                srow[r, j] = probability(srow[r, j], inv)
        for c0 in range(chunks):
            syncthreads()  # the probabilities (first chunk) or the previous chunk's readers of vs
            for e in range(tid, CHUNK * dv, threads):
                if c0 * CHUNK + e / dv < n:
                    vs[e / dv, e % dv] = va.load(vx, b, minimum(c0 * CHUNK + e / dv, n - 1), e % dv, ct)
                else:
                    vs[e / dv, e % dv] = zero
            syncthreads()
            for e in range(tid, rows * dv, threads):
                acc = ys[e / dv, e % dv]
                for jj in range(CHUNK):
                    acc = acc + srow[e / dv, c0 * CHUNK + jj] * vs[jj, e % dv]
                ys[e / dv, e % dv] = acc
        for e in range(tid, rows * dv, threads):
            if i0 + e / dv < m:
                yx[ya.index(b, i0 + e / dv, e % dv)] = cast(ys[e / dv, e % dv], yt.dtype)

    return attention_tiles_cuda


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
        mma = [{"form": "mma", "warps": w} for w in ("auto", 2, 4, 8)] if enabled() else []  # unless env = 0
        if mma and split_form.enabled():  # unless env = 0: keys split over a block's warps (cuda_attention_split.py)
            mma = [{"form": "mma", "warps": "auto", "split": "auto"}] + mma + [
                {"form": "mma", "warps": g * s, "split": s} for g, s in ((1, 4), (1, 8), (2, 4), (1, 2), (2, 2))]
        if level == 0:
            return mma[:1] or [{"rows": "auto", "threads": 128, "k_order": "d"}]
        tiled = [{"rows": r, "threads": t, "k_order": "d"} for r in ROW_TILES[:3] for t in (128, 256)]
        return (mma + [{"rows": "auto", "threads": 128, "k_order": "d"}] + [{"threads": t} for t in (128, 256, 64, 32)]
                + tiled + [{"rows": 8, "threads": 128, "k_order": "j"}])

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        name = "ops_attention_cuda"
        candidate = dict(params)
        split = params.get("split")
        if split == "auto" and params.get("form") == "mma" and eligible(task, attributes):
            split = split_form.auto_split(task, attributes, target)  # (W, S), or None: the mma form's grid
            params = {"form": "mma", "warps": split[0], "split": split[1]} if split else {"form": "mma"}
        if params.get("form") == "mma" and params.get("split") and eligible(task, attributes):  # keys split
            fn = split_form.split_kernel(task, attributes, int(params["warps"]), int(params["split"]), target, name)
        elif params.get("form") == "mma" and eligible(task, attributes):  # tensor cores (cuda_attention_mma.py)
            fn = mma_kernel(task, attributes, params.get("warps", "auto"), target, name)
        else:
            if params.get("form") == "mma":  # float32, D not a multiple of 16...: level 0's form
                params = {"rows": "auto", "threads": 128, "k_order": "d"}
            if params.get("rows") == "auto":
                params = {**params, **auto_form(task, attributes, target)}
            threads = int(params["threads"])
            rows = tile_rows(task, attributes, params.get("rows", 1), target)
            if rows > 1:
                fn = _tiled_kernel(task, attributes, threads, rows, params.get("k_order", "d"), name)
            elif params.get("rows") == 1 and params.get("k_order") == "d":  # opt-in only: not in the space
                fn = warp_kernel(task, attributes, threads, name)
            else:
                fn = _kernel(task, attributes, threads, name)
        buffers = tuple(BufferRef("input", k) for k in range(4)) + (BufferRef("output", 0),)
        if attributes["mask_kind"] != "none":
            module = ir_module(name, [fn.ir])
        else:  # the mask parameter is unused: dropped, so no buffer is bound twice
            ir = fn.ir
            module = ir_module(name, [Function(ir.name, [p for k, p in enumerate(ir.params) if k != 3], ir.body, ir.kind,
                                               ir.ret_type, ir.attrs)])
            buffers = buffers[:3] + buffers[4:]
        return ScheduledTask(module, (Launch(name, buffers),), (), source=self.name, params=candidate)


def tile_rows(task: Any, attributes: Mapping[str, Any], rows: Any, target: Any) -> int:
    """The query rows per block that a candidate's ``rows`` means for this task: 1 is
    the per-row form; R > 1 shrinks (R/2, ...) until the tiled form's shared memory
    fits, else the per-row form; "auto" is the largest of ROW_TILES that still gives
    each multiprocessor of the target a block (fewer blocks idle SMs, more rows per
    block read K and V fewer times), the smallest that fits when none does, and never
    more rows than M (the per-row form for M = 1)."""
    width = accumulator_dtype(task.inputs[0].dtype).bits // 8
    m = int(attributes["m"])
    fitting = [r for r in ROW_TILES if _tiled_shared_bytes(attributes, r, width) <= SHARED_LIMIT]
    if rows == "auto":
        sms = int(target.get("sm_count", 132)) if hasattr(target, "get") else 132
        entries = math.prod(int(s) for s in attributes["batch"])
        fitting = [r for r in fitting if r <= m]  # no block of mostly repeated rows (decode: M = 1)
        busy = [r for r in fitting if entries * -(-m // r) >= sms]
        return busy[0] if busy else (fitting[-1] if fitting else 1)
    rows = int(rows)
    return max([r for r in fitting if r <= rows], default=1) if rows > 1 else 1


ROW_THREADS = 128  # threads of the per-row forms chosen at level 0


def auto_form(task: Any, attributes: Mapping[str, Any], target: Any) -> dict:
    """What the level-0 candidate (``rows`` "auto") builds. The per-row form (a key per
    thread) where K is a stored [B, D, N] tensor (no graft feeds it: a row of keys is
    contiguous, the form's K reads are coalesced), the rows alone fill the GPU (B*M
    blocks, at least one per SM) and the keys and values of one batch entry, which
    every row of it reads again, fit in a quarter of one SM's shared memory / L1
    (``N * (D + Dv)`` elements: the re-reads stay on chip). Otherwise the tiled form
    with ``tile_rows``' R: when a graft feeds K (the exported K^T, a transpose of a
    [N, D]-major product, BERT's and GPT-2's), a per-row form reads every key once per
    query row through the graft (measured on the H200: 20-22 us a call for BERT's and
    GPT-2's 12 x 128 x 128 x 64, docs/perf_notes.md) where the tiled form shares it."""
    entries = math.prod(int(s) for s in attributes["batch"])
    m, n, d, dv = (int(attributes[k]) for k in ("m", "n", "d", "dv"))
    props = target.get if hasattr(target, "get") else (lambda key, default=None: default)
    sms, on_chip = int(props("sm_count", 132)), int(props("smem_per_sm", 228 * 1024))
    width = task.inputs[0].dtype.nbytes
    grafted_k = 1 in tuple(int(i) for i in attributes.get("fusion.prologue_inputs", ()))
    if not grafted_k and entries * m >= sms and n * (d + dv) * width <= on_chip // 4:
        return {"rows": 1, "threads": ROW_THREADS}
    return {"rows": "auto", "threads": 128, "k_order": "d"}
