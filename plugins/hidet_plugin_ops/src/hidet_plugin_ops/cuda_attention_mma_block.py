"""The tensor-core machinery the two mma forms of CUDA attention share: the mma form
(cuda_attention_mma.py: every warp walks all the keys) and the split form
(cuda_attention_split.py: the keys split over a block's warps, merged at the end).

Both hold a block of R query rows, 16 a warp, with Q, a tile of KT keys of K and V
in padded shared rows, and walk the tile in chunks of KC keys: S = Q K^T by
ldmatrix + mma.sync m16n8k16 into fp32 accumulators, the online softmax on them (in
each kernel: they differ in how a row with every key masked is kept finite), then
O += P V with P packed from the S accumulators. `MmaAttentionBlock` holds what is the
same: the operands and the block's shape, the loads of Q, K and V, and the statements
of the products, which the kernels call while they are traced (host helpers of the
script DSL, as `cuda_tensor_core_kernel.MmaBlock` for the matmul).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import TensorElement, const, if_then_else, minimum
from hidet_framework.ir.stmt import AsmStmt, BufferStoreStmt, seq
from hidet_framework.lang import f32, register_tensor, u32
from hidet_framework.mapping.task_mapping import auto_map

from .cpu_attention import kernel_operands

__all__ = ["PAD", "target_props", "chunk_keys", "MmaAttentionBlock"]

PAD = 8  # elements added to every shared row of Q, K, V (16 bytes): the 8 row addresses of
#         an ldmatrix phase then fall in 8 different bank groups


def target_props(target: Any):
    """``get(key, default)`` of the target's properties (the defaults where it has none)."""
    return target.get if hasattr(target, "get") else (lambda key, default=None: default)


def chunk_keys(d: int, dv: int) -> int:
    """KC, the keys a chunk multiplies at once: 64, or 32 when D or Dv > 64 (the S and O
    accumulators of a warp stay within its registers)."""
    return 64 if max(d, dv) <= 64 else 32


class MmaAttentionBlock:
    """A block of `rows` query rows and `threads` threads over tiles of `kt` keys in
    chunks of `kc`: the operands (`cpu_attention.kernel_operands`), the shape facts
    the kernels branch on, the Q / K / V loads and the tensor-core statements."""

    def __init__(self, task: Any, a: Mapping[str, Any], rows: int, threads: int, kc: int, kt: int):
        from hidet_plugin_cuda import lang as cu

        (self.batch, (m, n, d, dv), ct, self.types, (self.qa, self.ka, self.va, self.ya),
         (self.logit, self.probability)) = kernel_operands(task, a)
        self.m, self.n, self.d, self.dv, self.ct = m, n, d, dv, ct
        self.rows, self.threads, self.kc, self.kt = rows, threads, kc, kt
        self.ot = ot = task.inputs[0].dtype
        self.row_blocks, self.tiles = -(-m // rows), -(-n // kt)
        self.mma = cu.mma_sync_m16n8k16_f16_f32 if ot is dtypes.float16 else cu.mma_sync_m16n8k16_bf16_f32
        self.cvt = "f16x2" if ot is dtypes.float16 else "bf16x2"
        self.dp, self.dvp = d + PAD, dv + PAD
        self.q_map, self.k_map, self.v_map = (auto_map(r, c, workers=threads) for r, c in ((rows, d), (kt, d), (kt, dv)))
        self.lowest, self.zero = const(ct.min_value(), ct), const(0.0, ct)
        self.ninf, self.one = const(float("-inf"), ct), const(1.0, ct)
        self.part_rows, self.part_tile, self.part_chunk = m % rows != 0, n % kt != 0, n % kc != 0
        self.fzero = const(0.0, ot)

    # ---- loads -------------------------------------------------------------------
    def row_of(self, i):  # rows past M: row M-1 again (never stored)
        return minimum(i, self.m - 1) if self.part_rows else i

    def load_q(self, qx, b, i, c):
        return self.qa.load(qx, b, self.row_of(i), c, self.ot)

    def chunks(self, t0):  # chunks of KC keys in tile t0 that hold a key < N
        kt, kc = self.kt, self.kc
        return kt // kc if self.tiles == 1 else minimum(kt // kc, (self.n - t0 * kt + kc - 1) / kc)

    def kv_load(self, acc, x, b, j, c, key_first):
        """Element (key j, column c) of K (stored [D, N]: `key_first` False) or V."""
        ot, n = self.ot, self.n
        if not self.part_tile:
            return acc.load(x, b, j, c, ot) if key_first else acc.load(x, b, c, j, ot)
        jc = minimum(j, n - 1)
        value = acc.load(x, b, jc, c, ot) if key_first else acc.load(x, b, c, jc, ot)
        return if_then_else(j < n, value, self.fzero) if key_first else value  # V past N: 0 (p = 0 there)

    # ---- registers and their statements (host helpers, called while tracing) ------
    def registers(self):
        """The warp's registers, to unpack in the kernel: ldmatrix fragments of Q, K, V and
        P (qf, kf, vf, pf), the S and O accumulators (sc, oc), and its two rows' maximum
        and sum (top, tot)."""
        return (register_tensor(u32, [4]), register_tensor(u32, [4]), register_tensor(u32, [4]),
                register_tensor(u32, [4]), register_tensor(f32, [self.kc // 8, 4]),
                register_tensor(f32, [self.dv // 8, 4]), register_tensor(f32, [2]), register_tensor(f32, [2]))

    def clear_state(self, top, tot, oc):
        """Each row's maximum at the lowest value, its sum and O at 0."""
        out = []
        for h in range(2):
            out += [BufferStoreStmt(top, (h,), self.lowest), BufferStoreStmt(tot, (h,), self.zero)]
        out += [BufferStoreStmt(oc, (ni, e), self.zero) for ni in range(self.dv // 8) for e in range(4)]
        return seq(*out)

    def mma_into(self, acc, i, a_frag, b_regs):  # acc[i, :] += A B, in place
        regs = [TensorElement(acc, (const(i), const(e))) for e in range(4)]
        return self.mma(regs, a_frag, b_regs, regs)

    def pack(self, dst, lo, hi):  # two fp32 -> one b32 register of two halves, lo in bits 0..15
        return AsmStmt(f"cvt.rn.{self.cvt}.f32 %0, %1, %2;", (("=r", dst),), (("f", hi), ("f", lo)), False, ())

    def scores(self, sc, qf, kf, qs, ks, wr, lane, c1):
        """sc = S of the warp's 16 rows (from `wr`) and chunk `c1` of the tile: Q by
        ldmatrix from qs, K by ldmatrix from ks (rows of ks are keys)."""
        from hidet_plugin_cuda import lang as cu

        kc = self.kc
        out = [BufferStoreStmt(sc, (ni, e), self.zero) for ni in range(kc // 8) for e in range(4)]
        for kk in range(self.d // 16):
            out.append(cu.ldmatrix_x4(qf, qs[wr + lane % 16, kk * 16 + lane / 16 * 8]))
            for q2 in range(kc // 16):
                out.append(cu.ldmatrix_x4(kf, ks[c1 * kc + q2 * 16 + lane % 8 + lane / 16 * 8, kk * 16 + lane / 8 % 2 * 8]))
                out.append(self.mma_into(sc, 2 * q2, qf, [kf[0], kf[1]]))
                out.append(self.mma_into(sc, 2 * q2 + 1, qf, [kf[2], kf[3]]))
        return seq(*out)

    def rescale(self, oc, h, alpha):
        """O of row half `h` (rows g, then g + 8 of the fragment) times alpha."""
        return seq(*[BufferStoreStmt(oc, (ni, 2 * h + e), oc[ni, 2 * h + e] * alpha)
                     for ni in range(self.dv // 8) for e in range(2)])

    def products(self, oc, pf, vf, vs, sc, lane, c1):
        """oc += P V of chunk `c1`: P rounded to the operand dtype and packed straight from
        the S accumulators into A fragments, V by ldmatrix.trans (rows of vs are keys)."""
        from hidet_plugin_cuda import lang as cu

        kc, out = self.kc, []
        for kk in range(kc // 16):
            out.append(self.pack(pf[0], sc[2 * kk, 0], sc[2 * kk, 1]))
            out.append(self.pack(pf[1], sc[2 * kk, 2], sc[2 * kk, 3]))
            out.append(self.pack(pf[2], sc[2 * kk + 1, 0], sc[2 * kk + 1, 1]))
            out.append(self.pack(pf[3], sc[2 * kk + 1, 2], sc[2 * kk + 1, 3]))
            for q2 in range(self.dv // 16):
                out.append(cu.ldmatrix_x4(vf, vs[c1 * kc + kk * 16 + lane % 8 + lane / 8 % 2 * 8, q2 * 16 + lane / 16 * 8],
                                          trans=True))
                out.append(self.mma_into(oc, 2 * q2, pf, [vf[0], vf[1]]))
                out.append(self.mma_into(oc, 2 * q2 + 1, pf, [vf[2], vf[3]]))
        return seq(*out)
