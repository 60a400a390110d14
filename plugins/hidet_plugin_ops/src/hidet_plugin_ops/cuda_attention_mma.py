"""``attention`` on CUDA with tensor cores (float16 / bfloat16, D and Dv multiples of 16,
at most 128): the ``form`` "mma" of ``ops.attention_cuda``, an online-softmax kernel in
the manner of FlashAttention-2 (our own code, mma.sync m16n8k16 from hidet_plugin_cuda.lang).

    block (b, rows i0 .. i0+R-1), W warps, R = 16 W; warp w owns rows i0+16w .. i0+16w+15
        qs[r, :]  = q[b, i0 + r, :]           element loads (task mapping over (R, D), D
                                               fastest); rows past M repeat row M-1
        for each tile of KT keys j0 .. j0+KT-1 (KT: all keys when they fit, KT = N_pad):
            ks[jj, :] = kt[b, :, j0 + jj]     element loads, D fastest (the exported K^T is
            vs[jj, :] = v[b, j0 + jj, :]      a transpose: coalesced); keys past N load
                                               key N-1 (K) or 0 (V)
            for each chunk of KC keys (64, or 32 when D or Dv > 64):
                S  = Q K^T                    mma m16n8k16, fp32 accumulators in registers:
                                               Q fragments by ldmatrix from qs, K by
                                               ldmatrix (rows of ks are keys)
                s  = logit(S)                 scale, mask (add / select, the mask read as
                                               elements); keys past N -> -inf
                m' = max(m, rowmax s)         each lane holds 2 rows (g, g+8); the row's 4
                                               lanes (a quad) agree by 2 xor shuffles
                O *= exp(m - m'); l *= exp(m - m'); p = exp(s - m'); l += p (per lane)
                O += P V                      P rounded to the operand dtype and packed
                                               (cvt.rn.f16x2 / bf16x2) straight from the S
                                               accumulators into A fragments; V fragments
                                               by ldmatrix.trans (rows of vs are keys)
        l = quad sum of l; y[b, i, c] = O * (1 / l)   element stores, rows < M only
                                               (0 for a NaN under zero_nan)

m starts at the dtype's lowest finite value (as the other forms' row maximum), so a
fully masked row has m = lowest, every p = exp(-inf) = 0, l = 0, y = 0 * inf = NaN, and
zero_nan turns that into 0, the operator's meaning. Statistics and products accumulate
in float32; the only rounding beyond the other forms' is P's to the operand dtype.
Operands are read and the output written only as elements, so fusion grafts the head
split and merge onto them as on the other forms.

Shared rows are padded by 8 elements (16 bytes): the 8 row addresses of an ldmatrix
phase then fall in 8 different bank groups. Shared memory is dynamic: the Q tile plus
a KT-key tile of K and V, KT the largest multiple of KC that keeps a block within half
an SM's shared memory (two blocks an SM; all of N for the usual sequence lengths).
W (``warps``, "auto" by default) is 4, one warp per scheduler of an SM: measured on the
H200 (12 heads x 128 x 128 x 64, fp16, CUPTI kernel time a call) BERT 9.59 / 7.49 / 9.51 us
and GPT-2 10.49 / 9.03 / 11.14 us with 2 / 4 / 8 warps (the scalar tiled form: 15.43 and
16.30 us): 2 warps re-read K and V for fewer rows (48 blocks), 8 share schedulers (12
blocks). Fewer when M is small (the power of two that covers ceil(M / 16) rows); 8 when
4-warp blocks would take more than one wave of the target's SMs (resident blocks from
its shared memory and threads per SM), where fewer blocks re-reading K and V should
pay: an extrapolation, not measured. The form is level 0's choice and leads the spaces
(W auto, 2, 4, 8) for eligible tasks; HIDET_FRAMEWORK_ATTENTION_MMA=0 restores the
scalar forms' level 0 and spaces. An ineligible task (float32, D not a multiple of 16)
given ``{"form": "mma"}`` builds the level-0 scalar form instead.
"""
from __future__ import annotations

import math
import os
from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast, if_then_else, maximum, minimum
from hidet_framework.ir.math_functions import exp
from hidet_framework.lang import script, static_range
from hidet_framework.lang import attrs

from .cuda_attention_mma_block import PAD, MmaAttentionBlock, chunk_keys, target_props

__all__ = ["ENV", "enabled", "eligible", "plan", "mma_kernel"]

ENV = "HIDET_FRAMEWORK_ATTENTION_MMA"
FULL = 4  # warps of an "auto" block: one per scheduler of an SM (measured best, docstring)


def enabled() -> bool:
    """Whether the form is level 0's choice and in the spaces: yes unless
    ``HIDET_FRAMEWORK_ATTENTION_MMA=0`` (the scalar forms' level 0 and spaces, to compare)."""
    return os.environ.get(ENV, "1") != "0"


def eligible(task: Any, attributes: Mapping[str, Any]) -> bool:
    """float16 / bfloat16 operands, D and Dv multiples of 16 in [16, 128]."""
    d, dv = int(attributes["d"]), int(attributes["dv"])
    return (task.inputs[0].dtype in (dtypes.float16, dtypes.bfloat16)
            and all(x % 16 == 0 and 16 <= x <= 128 for x in (d, dv)))


def _layout(a: Mapping[str, Any], warps: int, budget: int) -> tuple[int, int, int]:
    """(KC, KT, shared bytes) for W warps: KT keys resident, a multiple of KC."""
    n, d, dv = (int(a[k]) for k in ("n", "d", "dv"))
    kc = chunk_keys(d, dv)
    fixed, per_key = 16 * warps * (d + PAD) * 2, (d + dv + 2 * PAD) * 2
    fit = max(kc, (budget - fixed) // per_key // kc * kc)
    kt = min(-(-n // kc) * kc, fit)
    return kc, kt, fixed + kt * per_key


def plan(task: Any, a: Mapping[str, Any], warps: Any, target: Any) -> tuple[int, int, int, int]:
    """(W, KC, KT, shared bytes) of a candidate's ``warps`` (an int, or "auto")."""
    props = target_props(target)
    sms, on_chip = int(props("sm_count", 132)), int(props("smem_per_sm", 228 * 1024))
    budget = on_chip // 2
    m, n, d, dv = (int(a[k]) for k in ("m", "n", "d", "dv"))
    entries = math.prod(int(s) for s in a["batch"])
    most = 1 << (-(-m // 16) - 1).bit_length()  # warps that cover M rows (a power of two)
    if warps != "auto":
        w = max(1, min(int(warps), most))
        return (w, *_layout(a, w, budget))
    w = min(FULL, most)
    smem = _layout(a, w, budget)[2]
    per_sm = max(1, min(on_chip // smem, int(props("max_threads_per_sm", 2048)) // (32 * w)))
    if most > w and entries * -(-m // (16 * w)) > sms * per_sm:  # more than one wave of blocks
        w *= 2  # fewer blocks re-read K and V (extrapolated: not measured)
    return (w, *_layout(a, w, budget))


def mma_kernel(task: Any, a: Mapping[str, Any], warps: Any, target: Any, name: str):
    from hidet_plugin_cuda import lang as cu

    w, kc, kt, smem = plan(task, a, warps, target)
    blk = MmaAttentionBlock(task, a, 16 * w, 32 * w, kc, kt)  # operands, loads, the tensor-core products
    batch, m, n, dv, ot = blk.batch, blk.m, blk.n, blk.dv, blk.ot
    qt, ktt, vt, mt, yt = blk.types
    ka, va, ya, logit, probability = blk.ka, blk.va, blk.ya, blk.logit, blk.probability
    rows, threads, row_blocks, tiles, dp, dvp = blk.rows, blk.threads, blk.row_blocks, blk.tiles, blk.dp, blk.dvp
    q_map, k_map, v_map = blk.q_map, blk.k_map, blk.v_map
    ninf, one = blk.ninf, blk.one
    part_rows, part_chunk = blk.part_rows, blk.part_chunk
    chunks, kv_load = blk.chunks, blk.kv_load

    def score(s, mk, b, i, j):
        z = logit(s, mk, b, blk.row_of(i), minimum(j, n - 1) if part_chunk else j)
        return if_then_else(j < n, z, ninf) if part_chunk else z

    @script
    def attention_mma_cuda(qx: qt, kx: ktt, vx: vt, mk: mt, yx: yt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = math.prod(batch) * row_blocks
        attrs.cuda.block_dim = threads
        attrs.cuda.dynamic_smem_bytes = smem
        qs = cu.dynamic_shared_tensor(ot, [rows, dp], 0)
        ks = cu.dynamic_shared_tensor(ot, [kt, dp], rows * dp * 2)
        vs = cu.dynamic_shared_tensor(ot, [kt, dvp], (rows * dp + kt * dp) * 2)
        qf, kf, vf, pf, sc, oc, top, tot = blk.registers()
        b = cu.blockIdx.x / row_blocks
        i0 = cu.blockIdx.x % row_blocks * rows
        tid = cu.threadIdx.x
        wr = tid / 32 * 16  # the warp's first row in the block
        lane = tid % 32
        for r, c in q_map.on(tid):
            qs[r, c] = blk.load_q(qx, b, i0 + r, c)
        blk.clear_state(top, tot, oc)
        for t0 in range(tiles):
            if tiles > 1:
                cu.syncthreads()  # the previous tile's readers of ks and vs are done
            for jj, c in k_map.on(tid):
                ks[jj, c] = kv_load(ka, kx, b, t0 * kt + jj, c, False)
            for jj, c in v_map.on(tid):
                vs[jj, c] = kv_load(va, vx, b, t0 * kt + jj, c, True)
            cu.syncthreads()
            for c1 in range(chunks(t0)):
                blk.scores(sc, qf, kf, qs, ks, wr, lane, c1)
                for h in static_range(2):
                    row = i0 + wr + lane / 4 + h * 8
                    mx = top[h]
                    for ni in static_range(kc // 8):
                        for e in static_range(2):
                            z = score(sc[ni, 2 * h + e], mk, b, row, t0 * kt + c1 * kc + ni * 8 + lane % 4 * 2 + e)
                            sc[ni, 2 * h + e] = z
                            mx = maximum(mx, z)
                    mx = maximum(mx, cu.shfl_xor_sync(cu.FULL_MASK, mx, 1))
                    mx = maximum(mx, cu.shfl_xor_sync(cu.FULL_MASK, mx, 2))
                    alpha = exp(top[h] - mx)
                    top[h] = mx
                    tot[h] = tot[h] * alpha
                    blk.rescale(oc, h, alpha)
                    for ni in static_range(kc // 8):
                        for e in static_range(2):
                            p = exp(sc[ni, 2 * h + e] - mx)
                            sc[ni, 2 * h + e] = p
                            tot[h] = tot[h] + p
                blk.products(oc, pf, vf, vs, sc, lane, c1)
        for h in static_range(2):
            s = tot[h]
            s = s + cu.shfl_xor_sync(cu.FULL_MASK, s, 1)
            s = s + cu.shfl_xor_sync(cu.FULL_MASK, s, 2)
            inv = one / s
            row = i0 + wr + lane / 4 + h * 8
            if not part_rows or row < m:
                for ni in static_range(dv // 8):
                    for e in static_range(2):
                        yx[ya.index(b, row, ni * 8 + lane % 4 * 2 + e)] = cast(probability(oc[ni, 2 * h + e], inv),
                                                                              yt.dtype)

    return attention_mma_cuda
