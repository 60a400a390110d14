"""``attention`` on CUDA with tensor cores, the keys split over a block's warps: the
candidates ``{"form": "mma", "warps": W, "split": S}`` of ``ops.attention_cuda``: ``split``
"auto" is level 0's pick and the split candidates are in the spaces (measured on the H200,
docs/perf_notes.md "GPU models, session 9"); HIDET_FRAMEWORK_ATTENTION_SPLIT=0 takes them out.

The mma form (cuda_attention_mma.py) gives each warp 16 query rows and all the keys, so
a block of W warps holds 16 W rows: GPT-2's and BERT's 12 heads x 128 rows make 24
blocks of 4 warps on 132 SMs, each loading all of its head's K and V and walking all
128 keys per warp in sequence. Here the W warps of a block are G = W / S row groups of
16 rows times S key groups: warp (g, s) takes rows 16 g .. 16 g + 15 of the block and
the chunks s, s + S, s + 2 S, ... of KC keys of each resident tile, keeping its own
online-softmax state (row maximum m, sum l, output O, as the mma form). Then:

    warp (g, s) stores m, l (quad-summed) and O (fp32) of its 16 rows in shared memory
    y[b, i, c] = sum_s O_s[i, c] exp(m_s - M) / sum_s l_s exp(m_s - M),  M = max_s m_s

(the row maximum starts at -inf, the float32 dtype's lowest; while every key a warp has
seen is masked, its exponentials are taken against 0 instead, so a key group that saw
only masked keys or none keeps m = -inf, l = 0, O = 0 and adds 0 -- the mma form, whose
first chunk of a causal row always holds a key, gets NaN there -- and a fully masked row
gives exp(-inf + inf) = NaN, which zero_nan makes 0, as the operator says). So 16 G
rows a block: 96 blocks for GPT-2 with G = 1, each warp a quarter of the keys. KC is
64 (32 when D or Dv > 64), halved down to 16 while it leaves a key group without a
chunk. A mask (added or selected) is staged in shared memory with the tile's K and V
(``ms[r, jj]``, float32), so its loads overlap the operand loads instead of following
each chunk's products (the mma form reads it per score, after the mma).

"auto" (level 0): 8 warps, G = 2 row groups of 4 key groups where that grid still gives
every SM a block, else G = 1 of 8 key groups (short sequences: GPT-2's and BERT's 12 x 128
rows get 96 blocks of 16 rows, 16 keys a warp); where the mma form's own grid (64-row
blocks) already gives every SM a block, its candidate is built instead (the split form
re-reads K and V in up to 4x the blocks). Measured on the H200 (session 9, CUPTI kernel
time, 12 x 128 x 128 x 64 fp16 with the head split / merge grafted): GPT-2 9.04 us (the
mma form) -> 5.56 (W 4, S 4) / 5.14 (8, 4) / 4.89 (8, 8) / 6.48 (4, 2); BERT 7.45 -> 5.20 /
4.99 / 4.60 / 6.14.
"""
from __future__ import annotations

import math
import os
from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast, const, if_then_else, maximum, minimum, not_equal
from hidet_framework.ir.math_functions import exp
from hidet_framework.lang import attrs, f32, script, static_range
from hidet_framework.mapping.task_mapping import auto_map

from .cpu_attention import _Batched
from .cuda_attention_mma_block import PAD, MmaAttentionBlock, chunk_keys, target_props

__all__ = ["ENV", "enabled", "split_plan", "split_kernel", "auto_split"]

ENV = "HIDET_FRAMEWORK_ATTENTION_SPLIT"
FPAD = 8  # floats added to every row of the staged mask and the partial outputs: the 8 rows a
#          fragment access touches fall in 2 bank groups instead of 1 (2-way, not 8-way)
SPLITS = (2, 4, 8)  # key groups a block may have
GROUPS = (4, 2, 1)  # row groups of 16 rows, largest first


def enabled() -> bool:
    """Whether ``split`` "auto" is level 0's pick and the split candidates are in the spaces:
    yes unless ``HIDET_FRAMEWORK_ATTENTION_SPLIT=0`` (the mma form's level 0, to compare)."""
    return os.environ.get(ENV, "1") != "0"


def auto_split(task: Any, a: Mapping[str, Any], target: Any) -> tuple[int, int] | None:
    """(W, S) of ``split`` "auto", or None where the mma form's grid (4-warp blocks of 64
    rows) already gives every SM a block."""
    sms = int(target_props(target)("sm_count", 132))
    entries = math.prod(int(s) for s in a["batch"])
    m = int(a["m"])
    if entries * -(-m // 64) >= sms:
        return None
    if m > 16 and entries * -(-m // 32) >= sms:  # 32-row blocks still fill the SMs
        return 8, 4
    return 8, 8  # (G = 4 would be the mma form's grid)


def split_plan(task: Any, a: Mapping[str, Any], warps: int, split: int, target: Any) -> dict:
    """The block's shape and shared memory: W warps in G = W / S row groups of 16 rows and S
    key groups, KC keys a chunk, KT keys resident a tile, byte offsets of each region."""
    if split not in SPLITS or warps % split or warps // split not in GROUPS:
        raise ValueError(f"attention split form: warps {warps} / split {split} not in G {GROUPS} x S {SPLITS}")
    on_chip = int(target_props(target)("smem_per_sm", 228 * 1024))
    n, d, dv = (int(a[k]) for k in ("n", "d", "dv"))
    rows = 16 * (warps // split)
    kc = chunk_keys(d, dv)
    while kc > 16 and -(-n // kc) < split:
        kc //= 2
    masked = a["mask_kind"] != "none"
    fixed = rows * (d + PAD) * 2 + warps * 16 * (dv + FPAD + 2) * 4 + (rows * FPAD * 4 if masked else 0)
    per_key = (d + dv + 2 * PAD) * 2 + (rows * 4 if masked else 0)  # K, V rows (+ a mask column)
    fit = max(kc, (on_chip // 2 - fixed) // per_key // kc * kc)
    kt = min(-(-n // kc) * kc, fit)
    q_off = 0
    k_off = q_off + rows * (d + PAD) * 2
    v_off = k_off + kt * (d + PAD) * 2
    m_off = v_off + kt * (dv + PAD) * 2
    o_off = m_off + (rows * (kt + FPAD) * 4 if masked else 0)
    s_off = o_off + warps * 16 * (dv + FPAD) * 4
    return {"warps": warps, "split": split, "rows": rows, "kc": kc, "kt": kt, "masked": masked,
            "offsets": (q_off, k_off, v_off, m_off, o_off, s_off), "smem": s_off + warps * 16 * 2 * 4}


def _staged_logit(task: Any, a: Mapping[str, Any], batch, ct):
    """(mask value of (b, i, j) as ct, logit(s, staged mask value)): the operator's logit
    (cpu_attention.row_functions) with the mask read in two steps."""
    kind = a["mask_kind"]
    mask = task.inputs[3] if kind != "none" else None
    mrank = len(mask.shape) if mask is not None else 0
    ma = _Batched(mask.shape if mrank >= 2 else (1, 1), batch, mask.dtype) if mask is not None else None
    scale, fill = float(a["scale"]), float(a["fill"])
    zero = const(0, dtypes.int32)

    def mask_value(mk, b, i, j):
        if mrank >= 2:
            value = mk[ma.index(b, i if mask.shape[-2] > 1 else zero, j if mask.shape[-1] > 1 else zero)]
        else:
            value = mk[(j,)] if mrank == 1 and mask.shape[0] > 1 else mk[(zero,) * mrank]
        return value if mask.dtype is ct else cast(value, ct)

    def logit(s_value, staged):
        value = s_value * const(scale, ct) if scale != 1.0 else s_value
        if kind == "add":
            return value + staged
        if kind == "select":
            return if_then_else(not_equal(staged, const(0.0, ct)), value, const(fill, ct))
        return value

    return mask_value, logit


def split_kernel(task: Any, a: Mapping[str, Any], warps: int, split: int, target: Any, name: str):
    from hidet_plugin_cuda import lang as cu

    p = split_plan(task, a, warps, split, target)
    rows, kc, kt, masked = p["rows"], p["kc"], p["kt"], p["masked"]
    blk = MmaAttentionBlock(task, a, rows, 32 * warps, kc, kt)  # operands, loads, the tensor-core products
    batch, m, n, dv, ot = blk.batch, blk.m, blk.n, blk.dv, blk.ot
    qt, ktt, vt, mt, yt = blk.types
    ka, va, ya, probability = blk.ka, blk.va, blk.ya, blk.probability
    mask_value, logit = _staged_logit(task, a, batch, blk.ct)
    q_off, k_off, v_off, m_off, o_off, s_off = p["offsets"]
    threads, row_blocks, tiles, dp, dvp = blk.threads, blk.row_blocks, blk.tiles, blk.dp, blk.dvp
    q_map, k_map, v_map = blk.q_map, blk.k_map, blk.v_map
    o_map = auto_map(rows, dv, workers=threads)
    m_map = auto_map(rows, kt, workers=threads)
    zero, ninf, one = blk.zero, blk.ninf, blk.one
    part_rows, part_tile, part_chunk = blk.part_rows, blk.part_tile, blk.part_chunk
    row_of, chunks, kv_load = blk.row_of, blk.chunks, blk.kv_load

    def score(s, ms, mk, b, i, r, j, jj):  # r, jj: the row and key within the block / tile
        z = logit(s, ms[r, jj] if masked else zero)
        return if_then_else(j < n, z, ninf) if part_chunk or part_tile else z

    @script
    def attention_split_cuda(qx: qt, kx: ktt, vx: vt, mk: mt, yx: yt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = math.prod(batch) * row_blocks
        attrs.cuda.block_dim = threads
        attrs.cuda.dynamic_smem_bytes = p["smem"]
        qs = cu.dynamic_shared_tensor(ot, [rows, dp], q_off)
        ks = cu.dynamic_shared_tensor(ot, [kt, dp], k_off)
        vs = cu.dynamic_shared_tensor(ot, [kt, dvp], v_off)
        ms = cu.dynamic_shared_tensor(f32, [rows, kt + FPAD], m_off)
        po = cu.dynamic_shared_tensor(f32, [warps * 16, dv + FPAD], o_off)
        pm = cu.dynamic_shared_tensor(f32, [2, warps * 16], s_off)
        qf, kf, vf, pf, sc, oc, top, tot = blk.registers()
        b = cu.blockIdx.x / row_blocks
        i0 = cu.blockIdx.x % row_blocks * rows
        tid = cu.threadIdx.x
        warp = tid / 32
        wr = warp / split * 16  # the warp's first row in the block
        lane = tid % 32
        for r, c in q_map.on(tid):
            qs[r, c] = blk.load_q(qx, b, i0 + r, c)
        blk.clear_state(top, tot, oc)
        for t0 in range(tiles):
            if tiles > 1:
                cu.syncthreads()  # the previous tile's readers of ks, vs and ms are done
            for jj, c in k_map.on(tid):
                ks[jj, c] = kv_load(ka, kx, b, t0 * kt + jj, c, False)
            for jj, c in v_map.on(tid):
                vs[jj, c] = kv_load(va, vx, b, t0 * kt + jj, c, True)
            if masked:
                for r, jj in m_map.on(tid):
                    ms[r, jj] = mask_value(mk, b, row_of(i0 + r), minimum(t0 * kt + jj, n - 1))
            cu.syncthreads()
            for c1 in range(warp % split, chunks(t0), split):
                blk.scores(sc, qf, kf, qs, ks, wr, lane, c1)
                for h in static_range(2):
                    r = wr + lane / 4 + h * 8
                    mx = top[h]
                    for ni in static_range(kc // 8):
                        for e in static_range(2):
                            jj = c1 * kc + ni * 8 + lane % 4 * 2 + e
                            z = score(sc[ni, 2 * h + e], ms, mk, b, i0 + r, r, t0 * kt + jj, jj)
                            sc[ni, 2 * h + e] = z
                            mx = maximum(mx, z)
                    mx = maximum(mx, cu.shfl_xor_sync(cu.FULL_MASK, mx, 1))
                    mx = maximum(mx, cu.shfl_xor_sync(cu.FULL_MASK, mx, 2))
                    safe = if_then_else(ninf < mx, mx, zero)  # every key so far masked: no NaN from -inf - -inf
                    alpha = exp(top[h] - safe)
                    top[h] = mx
                    tot[h] = tot[h] * alpha
                    blk.rescale(oc, h, alpha)
                    for ni in static_range(kc // 8):
                        for e in static_range(2):
                            pe = exp(sc[ni, 2 * h + e] - safe)
                            sc[ni, 2 * h + e] = pe
                            tot[h] = tot[h] + pe
                blk.products(oc, pf, vf, vs, sc, lane, c1)
        for h in static_range(2):  # this warp's state of its 16 rows, for the other key groups
            s = tot[h]
            s = s + cu.shfl_xor_sync(cu.FULL_MASK, s, 1)
            s = s + cu.shfl_xor_sync(cu.FULL_MASK, s, 2)
            slot = warp * 16 + lane / 4 + h * 8
            if lane % 4 == 0:
                pm[0, slot] = top[h]
                pm[1, slot] = s
            for ni in static_range(dv // 8):
                for e in static_range(2):
                    po[slot, ni * 8 + lane % 4 * 2 + e] = oc[ni, 2 * h + e]
        cu.syncthreads()
        for r, c in o_map.on(tid):
            base = r / 16 * split * 16 + r % 16  # the slot of key group 0 of r's row group
            big = pm[0, base]
            for g in static_range(1, split):
                big = maximum(big, pm[0, base + g * 16])
            total = zero
            acc = zero
            for g in static_range(split):
                w = exp(pm[0, base + g * 16] - big)
                total = total + pm[1, base + g * 16] * w
                acc = acc + po[base + g * 16, c] * w
            if not part_rows or i0 + r < m:
                yx[ya.index(b, i0 + r, c)] = cast(probability(acc, one / total), yt.dtype)

    return attention_split_cuda
