"""The implicit-GEMM convolution kernel: the tensor-core matmul kernel with its A
operand gathered from the image (fp16 / bf16 in, fp32 accumulation, mma.sync).

GEMM view (`cuda_conv_op`): A[m, k] = x at output pixel m = (n, oh, ow) and window
tap k = (kh, kw, c), zero in the padding; B = the packed weight ``[G, Kp, Np]``; group
g = blockIdx.z % G. Everything else is the tensor-core matmul's block
(`cuda_tensor_core_kernel.MmaBlock`, shared with that kernel): swizzled shared-memory
stages, ldmatrix fragments double buffered, mma.sync m16n8k16 over
``spatial(warps_m, warps_n)`` warps; split-K into an fp32 workspace plus a reduce
launch.

The gather (no im2col tensor in memory) is `cuda_conv_gather.ConvGather`: window
origins of the thread's output pixels in registers before the k-loop (as flat offsets
on the cp.async paths), the tap (kh, kw, c) once per k-tile, then per copy a few adds,
the bound checks the shape leaves and one select. Staging:

- ``cp``: 16-byte cp.async chunks of 8 channels from NHWC, zero filled with src-size
  0 outside the image, the multi-stage pipeline; for an NCHW x ("nhwc") a first
  launch (`build_nhwc_copy`) writes x to an NHWC workspace and the pipeline reads it;
- ``cf`` (``channels_first``, the space-0 pick's default where it applies; 1x1, stride 1, no padding
  or groups, NCHW x with H*W % 4 == 0): A is x[n] read as it lies, a k-major matrix: 16-byte chunks of 8 pixels (8-byte
  chunks of 4 where H*W % 8 == 4) of one channel into a [BK, BM] shared tile,
  fragments by ldmatrix.trans; no copy launch;
- ``reg``: guarded element reads into registers (pixel-major threads), stored to
  shared memory at the end of the k-tile (two buffers), as the matmul's ``reg``.

Stores of y are guarded tensor-element stores at ``y[n, o, oh, ow]`` (or NHWC), so
the fusion engine grafts bias / activation epilogues onto them.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Mapping

from hidet_framework.ir.dtypes import data_type
from hidet_framework.lang import attrs, f32, i32, register_tensor, script, script_module, static_range
from hidet_framework.lang.annotations import DTypeAnnotation

from hidet_plugin_matmul.cuda_conv_op import ConvGeometry
from hidet_plugin_matmul.cuda_ir_builders import (
    block_tile, cp_async_tile, grid3, guard, guarded_copy, select, seq_of, store,
)
from hidet_plugin_matmul.cuda_conv_gather import ConvGather
from hidet_plugin_matmul.cuda_matmul_common import ceil_div
from hidet_plugin_matmul.cuda_mma_pipeline import KTilePipeline
from hidet_plugin_matmul.cuda_smem_offsets import tile_copy
from hidet_plugin_matmul.cuda_tensor_core_kernel import MmaBlock


def build_conv_module(geo: ConvGeometry, dtype: str, params: Mapping[str, Any], name: str):
    from hidet_plugin_cuda import lang as cu

    gather = ConvGather(geo, params)
    blk = MmaBlock(params, dtype, a_kmajor=gather.k_major)  # warps, shared stages, fragments, mmas
    cfg = blk.cfg
    bm, bn, bk, threads, mt, nt, ks = (cfg[key] for key in ("bm", "bn", "bk", "threads", "mt", "nt", "ks"))
    split = cfg["split"]
    (oh, ow), groups, cg, cog = geo.out_hw, geo.groups, geo.cg, geo.cog
    m, k = geo.m, geo.k
    _, kp, np_ = geo.w_shape
    x_geo = geo
    geo, async_copy = gather.geo, gather.async_copy
    stages = cfg["stages"] if async_copy else 2
    tiles, k_whole, m_whole = gather.tiles, gather.k_whole, gather.m_whole
    a_size, b_size = blk.a_size, blk.b_size
    dt = DTypeAnnotation(data_type(dtype))
    a_copy, b_copy = gather.copy, tile_copy(blk.sb_layout, bk, bn, threads, 8 if async_copy else 1)
    a_deltas, sta_plan = a_copy.deltas, a_copy.plan
    b_origin, b_deltas, stb_plan = b_copy.origin, b_copy.deltas, b_copy.plan
    a_rows = gather.rows
    grid_n, grid_m = ceil_div(cog, bn), ceil_div(m, bm)
    n_whole = np_ % bn == 0
    out_dt = f32 if split > 1 else dt
    out_shape = (split, groups, m, cog) if split > 1 else geo.y_shape

    def mma_all(acc, af, bf, fb):  # accumulators as separate in and out operands (the form run in W1)
        return seq_of([blk.mma(acc[mi, ni, :], af[fb, mi, :], bf[fb, ni, :], acc[mi, ni, :])
                       for mi in range(mt) for ni in range(nt)])

    # ---- host helpers emitting statements (called while tracing) ----------------
    def copy_tiles(x, w, sa, sb, sta_off, stb_off, n0, gz, rn, rh, rw, cs, ai, aj, bi, bj, stage, kbase):
        out = []
        for j, values in enumerate(gather.column_state(kbase, ai, aj, gz)):  # once per k-tile, in registers
            out += [store(cs[v, j], e) for v, e in enumerate(values)]
        cols = [(cs[0, j], cs[1, j], cs[2, j]) for j in range(len(gather.cols))]
        size = 2 * gather.vec  # bytes a copy: 16 (8 under channels-first with H*W % 8 == 4)
        for t, (src, ok) in enumerate(gather.taps(x, rn, rh, rw, gz, kbase, ai, aj, cols)):
            base, const = sta_plan.uses[t]
            out.append(cu.cp_async(sa[stage * a_size + sta_off[base] + const], src, size, select(ok, size, 0),
                                   "cg" if size == 16 else "ca"))
        out.append(cp_async_tile(sb, stage * b_size, stb_off, stb_plan, b_deltas, kbase + bi, n0 + bj, (kp, np_),
                                 (k_whole, n_whole), lambda r, c: w[gz, r, c]))
        return seq_of(out)

    def load_regs(x, w, ra, rb, n0, gz, rn, rh, rw, ai, aj, bi, bj, kbase):
        out = []
        for t, (src, ok) in enumerate(gather.taps(x, rn, rh, rw, gz, kbase, ai, aj)):
            out.append(store(ra[t], src) if ok is True else guarded_copy(ra[t], src, ok))
        for t, (di, dj) in enumerate(b_deltas):
            row, col = kbase + bi + di, n0 + bj + dj
            ok = guard([(k_whole, row < kp), (n_whole, col < np_)])
            out.append(store(rb[t], w[gz, row, col]) if ok is True else guarded_copy(rb[t], w[gz, row, col], ok))
        return seq_of(out)

    @script
    def conv_tc(x: dt[geo.x_shape], w: dt[geo.w_shape], out: out_dt[out_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = (grid_n, grid_m, groups * split)
        attrs.cuda.block_dim = threads
        attrs.cuda.dynamic_smem_bytes = stages * (a_size + b_size) * 2
        sa, sb, acc, af, bf, lda_off, ldb_off, sta_off, stb_off = blk.registers(dt, stages, sta_plan, stb_plan)
        rn = register_tensor(i32, [len(a_rows)])
        rh = register_tensor(i32, [len(a_rows)])
        rw = register_tensor(i32, [len(a_rows)])
        tid = cu.threadIdx.x
        gz = cu.blockIdx.z % groups
        zs = cu.blockIdx.z // groups
        m_tile, n_tile = block_tile(cu.blockIdx.x, cu.blockIdx.y, grid_n, grid_m, params.get("raster", 0))
        m0 = m_tile * bm
        n0 = n_tile * bn
        k_begin = zs * (tiles * bk)
        blk.offsets(tid, lda_off, ldb_off, sta_off, stb_off, a_copy, b_copy)
        ai, aj = a_copy.origin(tid)
        bi, bj = b_origin(tid)
        for r, d in enumerate(a_rows):
            first, h0, w0 = gather.window_origin(gather.row_pixel(m0, ai, aj, d))
            rn[r] = first
            rh[r] = h0
            rw[r] = w0
        for mi, ni, e in grid3(mt, nt, 4):
            acc[mi, ni, e] = 0.0
        frags = (sa, sb, af, bf, lda_off, ldb_off, acc)
        if async_copy:
            cs = register_tensor(i32, [3, len(gather.cols)])  # column_state of the k-tile being copied
            pipe = KTilePipeline(blk, tiles, stages, k_begin, frags, mma_all,
                                 copy=partial(copy_tiles, x, w, sa, sb, sta_off, stb_off, n0, gz, rn, rh, rw, cs, ai, aj,
                                              bi, bj))
        else:
            ra = register_tensor(dt, [len(a_deltas)])
            rb = register_tensor(dt, [len(b_deltas)])
            pipe = KTilePipeline(blk, tiles, stages, k_begin, frags, mma_all,
                                 load=partial(load_regs, x, w, ra, rb, n0, gz, rn, rh, rw, ai, aj, bi, bj),
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
            if guard([(m_whole, row < m), (cog % bn == 0, col < cog)]):
                out[gather.out_index(zs, gz, row, col)] = acc[mi, ni, e]

    kernels = [conv_tc]
    if x_geo is not geo:
        kernels.insert(0, build_nhwc_copy(x_geo, dt, name + "_nhwc"))
    if split > 1:
        kernels.append(build_conv_split_reduce(geo, dt, split, name + "_reduce"))
    return script_module(*kernels, name=name)


def build_conv_split_reduce(geo: ConvGeometry, dt: Any, split: int, name: str):
    """y = sum over the split slices of the fp32 partials [split, G, M, Cog], rounded once."""
    from hidet_plugin_cuda import lang as cu

    (oh, ow), groups, m, cog = geo.out_hw, geo.groups, geo.m, geo.cog
    total = groups * m * cog

    @script
    def conv_split_reduce(ws: f32[(split, groups, m, cog)], y: dt[geo.y_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = ceil_div(total, 256)
        attrs.cuda.block_dim = 256
        idx = cu.blockIdx.x * 256 + cu.threadIdx.x
        if idx < total:
            gz = idx // (m * cog)
            row = idx // cog % m
            col = idx % cog
            s: f32 = 0.0
            for z in static_range(split):
                s += ws[z, gz, row, col]
            y[geo.y_index(row // (oh * ow), gz * cog + col, row // ow % oh, row % ow)] = s

    return conv_split_reduce


def build_nhwc_copy(geo: ConvGeometry, dt: Any, name: str):
    """ws[n, h, w, c] = x[n, c, h, w] through a 32x32 shared-memory tile (coalesced
    reads along h*w, writes along c); x is read by guarded element reads, so the fusion
    engine grafts a prologue here."""
    from hidet_plugin_cuda import lang as cu
    from hidet_framework.lang import shared_tensor

    n, c, h, w = geo.batch, geo.channels, geo.height, geo.width
    hw = h * w

    @script
    def nhwc_copy(x: dt[(n, c, h, w)], ws: dt[(n, h, w, c)]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = (ceil_div(hw, 32), ceil_div(c, 32), n)
        attrs.cuda.block_dim = 256
        tile = shared_tensor(dt, [32, 33])
        tx = cu.threadIdx.x % 32
        ty = cu.threadIdx.x // 32
        p0 = cu.blockIdx.x * 32
        c0 = cu.blockIdx.y * 32
        bn = cu.blockIdx.z
        for i in static_range(4):
            if c0 + ty + i * 8 < c and p0 + tx < hw:
                tile[ty + i * 8, tx] = x[bn, c0 + ty + i * 8, (p0 + tx) // w, (p0 + tx) % w]
        cu.syncthreads()
        for i in static_range(4):
            if p0 + ty + i * 8 < hw and c0 + tx < c:
                ws[bn, (p0 + ty + i * 8) // w, (p0 + ty + i * 8) % w, c0 + tx] = tile[tx, ty + i * 8]

    return nhwc_copy
