"""The tensor-core matmul kernel (fp16 / bf16 in, fp32 accumulation), in the script DSL.

One block computes a BM x BN tile of C (or, with split-K, a partial sum of it over one
slice of K). Inside the block:

- warps form ``spatial(warps_m, warps_n)``; each warp owns a (BM/warps_m) x
  (BN/warps_n) tile made of ``repeat(mt, nt)`` mma.sync m16n8k16 tiles, accumulators
  in fp32 registers (``acc[mi, ni, 4]``, the PTX fragment layout);
- A and B tiles live in shared memory in `stages` buffers with XOR-swizzled row-major
  layouts (16-byte chunks permuted per row) so that the 8 row addresses of every
  ldmatrix phase hit 8 different bank groups, and so do the 16-byte copies;
- fragments come from ldmatrix.x4 (A) and ldmatrix.x4.trans (B, stored [k, n]), double
  buffered in registers: the next k-step's fragments load before this step's mmas.

Global -> shared, three paths (`staging`), chosen by the shape and one parameter:

- ``cp`` (rows of A and B 16-byte aligned: K % 8 == 0 and N % 8 == 0): a
  multi-stage pipeline, tile kt+stages-1 in flight while tile kt is multiplied;
  out-of-range chunks have src-size 0, which zero-fills (and the source address is
  clamped to element 0 so no address past the data is formed);
- ``pad`` (v2, candidates with ``pad`` on any other shape, e.g. K = 997): a first launch copies A (when K % 8)
  and B into workspace buffers with K and N rounded up to 8, zero-filled, and the main
  kernel runs the ``cp`` pipeline on them (a few microseconds of copying buys 16-byte
  cp.async chunks and the deep pipeline instead of element loads);
- ``reg`` (unaligned rows without ``pad``, as in v1; any shape with ``reg_stage``):
  guarded tensor-element reads into registers at the start of tile kt, stored into
  the other of two buffers at its end. Works for any shape.

Stores of C are guarded tensor-element stores (fusible); the accumulators are rounded
to the input dtype. With split-K the partial sums go to an fp32 workspace and a
second kernel adds them up.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Mapping

from hidet_framework.mapping.layout import row_major, swizzle
from hidet_framework.mapping.task_mapping import spatial
from hidet_framework.lang import (
    attrs, f32, i32, register_tensor, script, script_module, static_range, u32,
)
from hidet_framework.lang.annotations import DTypeAnnotation
from hidet_framework.ir.dtypes import data_type

from hidet_plugin_matmul.cuda_ir_builders import (
    block_tile, both, cp_async_tile, grid3, guard, guarded_copy, seq_of, store,
)
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, worker_origin
from hidet_plugin_matmul.cuda_mma_pipeline import KTilePipeline
from hidet_plugin_matmul.cuda_pad_operands import build_pad_kernel, padded_shapes
from hidet_plugin_matmul.cuda_smem_offsets import base_offset_exprs, plan_offsets, tile_copy
from hidet_plugin_matmul.operators import MatmulOperands


def smem_swizzle(rows: int, cols: int):
    """Row-major (rows, cols) of 2-byte elements, 16-byte chunks XOR-permuted so that 8
    consecutive rows read at one logical chunk land in 8 different bank groups."""
    chunks = cols // 8
    period = min(8, chunks)
    return swizzle(row_major(rows, cols), vector=8, period=period, row_step=max(1, 8 // chunks))


def tc_config(params: Mapping[str, Any]) -> dict:
    bm, bn, bk = params["block_m"], params["block_n"], params["block_k"]
    wm, wn = params["warps_m"], params["warps_n"]
    stages = params["stages"]
    return {"bm": bm, "bn": bn, "bk": bk, "threads": 32 * wm * wn, "wtm": bm // wm, "wtn": bn // wn,
            "mt": bm // wm // 16, "nt": bn // wn // 8, "ks": bk // 16, "stages": stages,
            "smem": stages * (bm * bk + bk * bn) * 2, "split": params.get("split_k", 1)}


class MmaBlock:
    """The block-level mma.sync machinery the matmul kernel and the implicit-GEMM conv
    kernel (`cuda_conv_kernel`) share: warps over the block tile, swizzled shared
    stages, ldmatrix fragments (double buffered), the mmas, the register-staged
    stores, the per-thread offset registers and the accumulators' output coordinates.
    `a_kmajor`: A's shared tile is stored [BK, BM] (M contiguous, as B is [BK, BN]) and
    its fragments are read with ldmatrix.trans (the conv's channels-first 1x1 path)."""

    def __init__(self, params: Mapping[str, Any], dtype: str, a_kmajor: bool = False):
        from hidet_plugin_cuda import lang as cu

        self.cfg = cfg = tc_config(params)
        bm, bn, bk, ks, mt, nt = cfg["bm"], cfg["bn"], cfg["bk"], cfg["ks"], cfg["mt"], cfg["nt"]
        self.a_size, self.b_size, self.a_kmajor = bm * bk, bk * bn, a_kmajor
        self.sa_layout = smem_swizzle(bk, bm) if a_kmajor else smem_swizzle(bm, bk)
        self.sb_layout = smem_swizzle(bk, bn)
        self.mma = cu.mma_sync_m16n8k16_f16_f32 if dtype == "float16" else cu.mma_sync_m16n8k16_bf16_f32
        self.warp_map = spatial(params["warps_m"], params["warps_n"])
        # ldmatrix addressing: A x4 (16 rows x 16 k; k-major: x4.trans of 16 k x 16 rows),
        # B x4.trans (16 k x 16 n)
        if a_kmajor:
            self.lda_deltas = [(kk * 16, mi * 16) for kk in range(ks) for mi in range(mt)]
        else:
            self.lda_deltas = [(mi * 16, kk * 16) for kk in range(ks) for mi in range(mt)]
        self.ldb_deltas = [(kk * 16, q * 16) for kk in range(ks) for q in range(nt // 2)]
        self.lda_plan = plan_offsets(self.sa_layout, self.lda_origin, self.lda_deltas, cfg["threads"])
        self.ldb_plan = plan_offsets(self.sb_layout, self.ldb_origin, self.ldb_deltas, cfg["threads"])

    def warp_of(self, t):  # (warp row, warp col) origin in elements
        wi, wj = worker_origin(self.warp_map, t // 32)
        return wi * self.cfg["wtm"], wj * self.cfg["wtn"]

    def lda_origin(self, t):
        if self.a_kmajor:  # lanes 8j..8j+7 address matrix j = (rows +8 if j odd, k +8 if j >= 2)
            return t % 8 + t % 32 // 16 * 8, self.warp_of(t)[0] + t % 32 // 8 % 2 * 8
        return self.warp_of(t)[0] + t % 32 % 16, t % 32 // 16 * 8

    def ldb_origin(self, t):
        return t % 8 + t % 32 // 8 % 2 * 8, self.warp_of(t)[1] + t % 32 // 16 * 8

    def load_frags(self, af, bf, lda_off, ldb_off, sa, sb, fb, stage, kk):
        from hidet_plugin_cuda import lang as cu

        out = []
        for mi in range(self.cfg["mt"]):
            delta = (kk * 16, mi * 16) if self.a_kmajor else (mi * 16, kk * 16)
            base, const = self.lda_plan.uses[self.lda_deltas.index(delta)]
            src = sa[stage * self.a_size + lda_off[base] + const]
            out.append(cu.ldmatrix_x4(af[fb, mi, :], src, trans=True) if self.a_kmajor
                       else cu.ldmatrix_x4(af[fb, mi, :], src))
        for q in range(self.cfg["nt"] // 2):
            base, const = self.ldb_plan.uses[self.ldb_deltas.index((kk * 16, q * 16))]
            regs = [bf[fb, 2 * q, 0], bf[fb, 2 * q, 1], bf[fb, 2 * q + 1, 0], bf[fb, 2 * q + 1, 1]]
            out.append(cu.ldmatrix_x4(regs, sb[stage * self.b_size + ldb_off[base] + const], trans=True))
        return seq_of(out)

    def mma_all(self, acc, af, bf, fb):
        out = []
        for mi in range(self.cfg["mt"]):
            for ni in range(self.cfg["nt"]):
                c = acc[mi, ni, :]
                out.append(self.mma(c, af[fb, mi, :], bf[fb, ni, :], c))
        return seq_of(out)

    def store_regs(self, sta_plan, stb_plan, sa, sb, ra, rb, sta_off, stb_off, stage):
        """Register-staged tiles (``ra``/``rb``, one element per copy delta) to stage `stage`
        (`sta_plan`, `stb_plan`: the copies' offset plans)."""
        out = []
        for t in range(len(sta_plan.uses)):
            base, const = sta_plan.uses[t]
            out.append(store(sa[stage * self.a_size + sta_off[base] + const], ra[t]))
        for t in range(len(stb_plan.uses)):
            base, const = stb_plan.uses[t]
            out.append(store(sb[stage * self.b_size + stb_off[base] + const], rb[t]))
        return seq_of(out)

    def registers(self, dt, stages, sta_plan, stb_plan):
        """The block's storage, to unpack in the kernel: the shared stages of A and B (sa,
        sb), the accumulators (acc), the double-buffered fragments (af, bf), the offset
        registers of the fragment loads (lda_off, ldb_off) and the tile copies (sta_off,
        stb_off; `sta_plan`, `stb_plan`: the copies' offset plans)."""
        from hidet_plugin_cuda import lang as cu

        mt, nt = self.cfg["mt"], self.cfg["nt"]
        return (cu.dynamic_shared_tensor(dt, [stages * self.a_size], 0),
                cu.dynamic_shared_tensor(dt, [stages * self.b_size], stages * self.a_size * 2),
                register_tensor(f32, [mt, nt, 4]), register_tensor(u32, [2, mt, 4]), register_tensor(u32, [2, nt, 2]),
                register_tensor(i32, [len(self.lda_plan.bases)]), register_tensor(i32, [len(self.ldb_plan.bases)]),
                register_tensor(i32, [len(sta_plan.bases)]), register_tensor(i32, [len(stb_plan.bases)]))

    def offsets(self, tid, lda_off, ldb_off, sta_off, stb_off, a_copy, b_copy):
        """The offset registers' initial values (`cuda_smem_offsets`), as statements."""
        out = []
        for regs, layout, origin, plan in ((lda_off, self.sa_layout, self.lda_origin(tid), self.lda_plan),
                                           (ldb_off, self.sb_layout, self.ldb_origin(tid), self.ldb_plan),
                                           (sta_off, self.sa_layout, a_copy.origin(tid), a_copy.plan),
                                           (stb_off, self.sb_layout, b_copy.origin(tid), b_copy.plan)):
            out += [store(regs[t], e) for t, e in enumerate(base_offset_exprs(layout, origin, plan))]
        return seq_of(out)


def uses_cp_async(ops: MatmulOperands) -> bool:
    """cp.async needs 16-byte aligned source rows (the allocator aligns the bases)."""
    return ops.k % 8 == 0 and ops.n % 8 == 0


def staging(ops: MatmulOperands, params: Mapping[str, Any]) -> str:
    """How a candidate moves A and B to shared memory on this shape:
    "cp" (aligned rows, cp.async), "reg" (unaligned rows, or params["reg_stage"]:
    register-staged element loads, v1's path), "pad" (unaligned rows and
    params["pad"]: a first launch copies A and/or B into zero-padded buffers whose
    rows are multiples of 8 elements, then the cp.async pipeline)."""
    if params.get("reg_stage"):
        return "reg"
    if uses_cp_async(ops):
        return "cp"
    return "pad" if params.get("pad") else "reg"


def build_tc_module(ops: MatmulOperands, dtype: str, params: Mapping[str, Any], name: str):
    from hidet_plugin_cuda import lang as cu

    cfg = tc_config(params)
    bm, bn, bk, threads = cfg["bm"], cfg["bn"], cfg["bk"], cfg["threads"]
    mt, nt, ks = cfg["mt"], cfg["nt"], cfg["ks"]
    split = cfg["split"]
    m, n, k, batch = ops.m, ops.n, ops.k, ops.batch
    path = staging(ops, params)
    async_copy = path != "reg"
    # what the main kernel reads: A and B themselves, or (path "pad") the padded copies,
    # whose K (and B's N) extents are multiples of 8; zeros past k / n add nothing
    if path == "pad":
        a_shape, b_shape = padded_shapes(ops)
    else:
        a_shape, b_shape = ops.a_shape, ops.b_shape
    ka, nb = a_shape[-1], b_shape[-1]
    stages = cfg["stages"] if async_copy else 2  # register staging double-buffers
    tiles_all = max(1, ceil_div(k, bk))
    tiles = ceil_div(tiles_all, split)  # k-tiles per split slice
    blk = MmaBlock(params, dtype)  # warps, shared stages, fragments, mmas
    a_size, b_size = blk.a_size, blk.b_size  # elements per stage
    dt = DTypeAnnotation(data_type(dtype))
    sa_layout, sb_layout = blk.sa_layout, blk.sb_layout

    # global -> shared copies: 16-byte chunks (cp.async) or elements (registers)
    vec = 8 if async_copy else 1
    a_copy, b_copy = tile_copy(sa_layout, bm, bk, threads, vec), tile_copy(sb_layout, bk, bn, threads, vec)
    a_origin, a_deltas, sta_plan = a_copy.origin, a_copy.deltas, a_copy.plan
    b_origin, b_deltas, stb_plan = b_copy.origin, b_copy.deltas, b_copy.plan

    grid_n, grid_m = ceil_div(n, bn), ceil_div(m, bm)
    out_dt = f32 if split > 1 else dt
    out_shape = (split, batch, m, n) if split > 1 else ops.c_shape

    def out_index(zs, bz, row, col):
        return (zs, bz, row, col) if split > 1 else ops.c_index(bz, row, col)

    # guards the static shape makes always true are not emitted (v3): every block tile
    # whole in M / N, every k-tile whole in K (no split slice runs past the end)
    m_whole, n_whole = m % bm == 0, nb % bn == 0 and n % bn == 0
    k_whole = ka % bk == 0 and k % bk == 0 and tiles * split == tiles_all

    def copy_tiles(a, b, sa, sb, sta_off, stb_off, m0, n0, bz, ai, aj, bi, bj, stage, kbase):
        return seq_of([
            cp_async_tile(sa, stage * a_size, sta_off, sta_plan, a_deltas, m0 + ai, kbase + aj, (m, ka),
                          (m_whole, k_whole), lambda r, c: a[ops.a_index(bz, r, c)]),
            cp_async_tile(sb, stage * b_size, stb_off, stb_plan, b_deltas, kbase + bi, n0 + bj, (k, nb),
                          (k_whole, n_whole), lambda r, c: b[ops.b_index(bz, r, c)])])

    def load_regs(a, b, ra, rb, m0, n0, bz, ai, aj, bi, bj, kbase):
        out = []
        for t, (di, dj) in enumerate(a_deltas):
            row, col = m0 + ai + di, kbase + aj + dj
            out.append(guarded_copy(ra[t], a[ops.a_index(bz, row, col)], both(row < m, col < k)))
        for t, (di, dj) in enumerate(b_deltas):
            row, col = kbase + bi + di, n0 + bj + dj
            out.append(guarded_copy(rb[t], b[ops.b_index(bz, row, col)], both(row < k, col < n)))
        return seq_of(out)

    @script
    def matmul_tc(a: dt[a_shape], b: dt[b_shape], out: out_dt[out_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = (grid_n, grid_m, batch * split)
        attrs.cuda.block_dim = threads
        attrs.cuda.dynamic_smem_bytes = stages * (a_size + b_size) * 2
        sa, sb, acc, af, bf, lda_off, ldb_off, sta_off, stb_off = blk.registers(dt, stages, sta_plan, stb_plan)
        tid = cu.threadIdx.x
        bz = cu.blockIdx.z % batch
        zs = cu.blockIdx.z // batch
        m_tile, n_tile = block_tile(cu.blockIdx.x, cu.blockIdx.y, grid_n, grid_m, params.get("raster", 0))
        m0 = m_tile * bm
        n0 = n_tile * bn
        k_begin = zs * (tiles * bk)
        blk.offsets(tid, lda_off, ldb_off, sta_off, stb_off, a_copy, b_copy)
        ai, aj = a_origin(tid)
        bi, bj = b_origin(tid)
        for mi, ni, e in grid3(mt, nt, 4):
            acc[mi, ni, e] = 0.0
        frags = (sa, sb, af, bf, lda_off, ldb_off, acc)
        if async_copy:
            pipe = KTilePipeline(blk, tiles, stages, k_begin, frags, blk.mma_all,
                                 copy=partial(copy_tiles, a, b, sa, sb, sta_off, stb_off, m0, n0, bz, ai, aj, bi, bj))
        else:
            ra = register_tensor(dt, [len(a_deltas)])
            rb = register_tensor(dt, [len(b_deltas)])
            pipe = KTilePipeline(blk, tiles, stages, k_begin, frags, blk.mma_all,
                                 load=partial(load_regs, a, b, ra, rb, m0, n0, bz, ai, aj, bi, bj),
                                 store=partial(blk.store_regs, sta_plan, stb_plan, sa, sb, ra, rb, sta_off, stb_off))
        pipe.fill()
        for kt in range(tiles):
            stage = kt % stages
            for kk in static_range(ks):
                pipe.step(kt, kk, stage)
        lane = tid % 32
        wr, wc = blk.warp_of(tid)
        for mi, ni, e in grid3(mt, nt, 4):
            row = m0 + wr + mi * 16 + lane // 4 + e // 2 * 8
            col = n0 + wc + ni * 8 + lane % 4 * 2 + e % 2
            if guard([(m_whole, row < m), (n % bn == 0, col < n)]):
                out[out_index(zs, bz, row, col)] = acc[mi, ni, e]

    kernels = [matmul_tc]
    if path == "pad":
        kernels.insert(0, build_pad_kernel(ops, dt, name + "_pad"))
    if split > 1:
        kernels.append(build_split_reduce(ops, dt, split, name + "_reduce"))
    return script_module(*kernels, name=name)


def build_split_reduce(ops: MatmulOperands, dt: Any, split: int, name: str):
    """c = sum over the split slices of the fp32 workspace, rounded once to the dtype."""
    from hidet_plugin_cuda import lang as cu

    m, n, batch = ops.m, ops.n, ops.batch
    total = batch * m * n

    @script
    def split_reduce(ws: f32[(split, batch, m, n)], c: dt[ops.c_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = ceil_div(total, 256)
        attrs.cuda.block_dim = 256
        idx = cu.blockIdx.x * 256 + cu.threadIdx.x
        if idx < total:
            bz = idx // (m * n)
            row = idx // n % m
            col = idx % n
            s: f32 = 0.0
            for z in static_range(split):
                s += ws[z, bz, row, col]
            c[ops.c_index(bz, row, col)] = s

    return split_reduce
