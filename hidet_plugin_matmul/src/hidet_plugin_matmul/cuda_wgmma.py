"""CUDA fp16 / bf16 matmul on Hopper's warpgroup tensor cores (wgmma, sm_90a).

One block computes a BM x BN tile of C with `warpgroups` warpgroups stacked along M,
each owning `m_tiles` m64 slices; one ``wgmma.mma_async m64nBNk16`` per slice and
16-deep k-step reads both operands from shared memory, so the register file holds
only the fp32 accumulators (m_tiles * BN / 2 per thread) and no fragments: what
limits mma.sync (a warp re-reads its A and B fragments through registers for every
m16n8 tile) is gone.

Shared memory, `stages` buffers of BK = 64 (one 128-byte row of 16-bit elements):

- A tile [BM, 64], K-major: row r at r * 128 bytes, its 16-byte chunks XOR-permuted by
  r % 8 (`swizzle(row_major(BM, 64), vector=8, period=8)`), which is the hardware's
  128-byte swizzle when the buffer is 1024-byte aligned. Descriptor: stride offset
  1024 (8-row groups), start advanced 32 bytes per k16 step;
- B tile [64, BN], N-major (B is row-major [K, N]): N split into 64-wide column blocks
  of 64 x 128 bytes, each swizzled like A (``row_major(1, BN/64) * swizzle(...)``);
  descriptor: leading offset 8192 (next 64 columns), stride offset 1024 (next 8 rows
  of K), start advanced 2048 bytes per k16 step, transposed-B flag set.

Global -> shared: cp.async 16-byte chunks in a `stages`-deep pipeline (rows must be
16-byte aligned, so the template applies when K % 8 == 0 and N % 8 == 0; chunks past
the edges are zero-filled). Per k-tile: wait for its copies, fence them into the async
proxy, barrier, issue the 4 x m_tiles wgmmas, commit, queue the copy of the tile
`stages - 1` ahead into the buffer the previous k-tile used, and wait for the wgmmas
(so at the next barrier every warpgroup is done reading that buffer).
C is written with guarded tensor-element stores (fusible), rounded to the dtype.

Default (first at every level): ``{"auto": 1}``, the level-2 candidate with the least
modelled time on the target for the task's shape (`cuda_defaults`); its `estimate` lets
the tuner's level 0 weigh it against the mma.sync template's default (a few large tiles
and no split-K leave most of the GPU idle at batch-1 shapes such as 128x768x768).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hidet_framework.ir.dtypes import data_type
from hidet_framework.mapping.layout import row_major, swizzle
from hidet_framework.lang import attrs, f32, i32, register_tensor, script, script_module, static_range
from hidet_framework.lang.annotations import DTypeAnnotation
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

from hidet_plugin_matmul.cuda_defaults import (AUTO, Gemm, Gpu, Kernel, choose, is_auto, modelled_seconds,
                                               resolve,
                                               tile_efficiency)
from hidet_plugin_matmul.cuda_stage_operands import prologue_inputs
from hidet_plugin_matmul.cuda_ir_builders import block_tile, cp_async_tile, guard, seq_of
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, target_int, task_dtype
from hidet_plugin_matmul.cuda_smem_offsets import tile_copy
from hidet_plugin_matmul.operators import MatmulOperands

BK = 64  # one 128-byte swizzle row of 16-bit elements
DEFAULT = {"warpgroups": 2, "m_tiles": 1, "block_n": 256, "stages": 4, "raster": 0}
WGMMA_RATE = 0.85  # of the SM's tensor peak at a saturating tile (one wgmma group waited per k-tile)
REGS_BESIDE_ACC = 40


def wgmma_config(params: Mapping[str, Any]) -> dict:
    wg, mt, bn = params["warpgroups"], params["m_tiles"], params["block_n"]
    bm = 64 * wg * mt
    return {"bm": bm, "bn": bn, "threads": 128 * wg, "acc": mt * bn // 2,
            "smem": params["stages"] * (bm + bn) * BK * 2}


def wgmma_legal(params: Mapping[str, Any], target: Any) -> bool:
    cfg = wgmma_config(params)
    return cfg["smem"] <= target_int(target, "smem_per_block_optin", 227 * 1024) and cfg["acc"] <= 128


def wgmma_kernel(params: Mapping[str, Any]) -> Kernel:
    """A candidate as the cost model sees it (a warpgroup's m64 x BN instruction tile
    sets the efficiency)."""
    p = dict(DEFAULT, **params)
    cfg = wgmma_config(p)
    return Kernel(cfg["bm"], cfg["bn"], BK, cfg["threads"], cfg["smem"], cfg["acc"] + REGS_BESIDE_ACC, p["stages"],
                  rate=WGMMA_RATE * tile_efficiency(64, cfg["bn"], 8))


def wgmma_auto(ops: MatmulOperands, elem: int, target: Any) -> tuple[dict, float]:
    """The default's parameters for this shape and their modelled seconds."""
    return choose(wgmma_space(target, 2), lambda p: None if is_auto(p) else wgmma_kernel(p),
                  Gemm(ops.m, ops.n, ops.k, ops.batch, elem), target)


def wgmma_space(target: Any, level: int) -> list[dict]:
    """Block shapes from the register file (<= 128 accumulators a thread) and stages
    from shared memory; empty on anything but sm_90 (wgmma is Hopper's)."""
    if getattr(target, "arch", None) not in ("sm_90", "sm_90a"):
        return []
    if level == 0:
        return [dict(AUTO)]
    out = [dict(AUTO), DEFAULT]

    def add(p: dict) -> None:
        p = dict(DEFAULT, **p)
        if p not in out and wgmma_legal(p, target):
            out.append(p)

    shapes = [(2, 1, 256), (2, 1, 128), (2, 2, 128), (1, 2, 256), (1, 2, 128), (1, 1, 256)]
    if level >= 1:
        for wg, mt, bn in shapes[: 4 if level == 1 else len(shapes)]:
            for stages in ((3, 4) if level == 1 else (2, 3, 4, 5, 6)):
                add({"warpgroups": wg, "m_tiles": mt, "block_n": bn, "stages": stages})
        for wg, mt, bn in shapes[:3]:
            add({"warpgroups": wg, "m_tiles": mt, "block_n": bn, "stages": 4, "raster": 8})
    return out


class CudaWgmmaMatmul(Template):
    """fp16/bf16 matmul with wgmma (sm_90a); see the module docstring."""

    name = "matmul.cuda_wgmma"
    operator = "matmul"
    target = "cuda"
    version = "1"
    priority = 3  # above mma.sync: its default runs 515 TFLOP/s at 4096^3 fp16 (mma.sync's best: 408)

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        ops = MatmulOperands(attributes)
        return task_dtype(task) in ("float16", "bfloat16") and ops.k % 8 == 0 and ops.n % 8 == 0

    def space(self, target: Any, level: int) -> list[dict]:
        return wgmma_space(target, level)

    def estimate(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> float:
        """Modelled seconds of `params` (the default: of the candidate it resolves to)."""
        ops, elem = MatmulOperands(attributes), data_type(task_dtype(task)).nbytes
        if prologue_inputs(attributes):  # cp.async operands refuse the group's prologue: it would not fuse
            return math.inf
        if params == AUTO:
            return wgmma_auto(ops, elem, target)[1]
        params = resolve(params, lambda: wgmma_auto(ops, elem, target)[0])
        return modelled_seconds(Gemm(ops.m, ops.n, ops.k, ops.batch, elem), wgmma_kernel(params),
                                Gpu.from_target(target))

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        ops = MatmulOperands(attributes)
        dtype = task_dtype(task)
        params = resolve(params, lambda: wgmma_auto(ops, data_type(dtype).nbytes, target)[0])
        p = dict(DEFAULT, **params)
        if ops.k % 8 or ops.n % 8:
            raise ValueError(f"{self.name}: rows of A and B must be 16-byte aligned (K, N multiples of 8), "
                             f"got K={ops.k}, N={ops.n}")
        name = (f"matmul_wgmma_{dtype}_{ops.key()}_wg{p['warpgroups']}x{p['m_tiles']}_n{p['block_n']}"
                f"_s{p['stages']}{'_r%d' % p['raster'] if p['raster'] else ''}")
        module = script_module(build_wgmma_kernel(ops, dtype, p, name), name=name)
        launch = Launch(name, (BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)))
        return ScheduledTask(module, (launch,), (), source=self.name, params=p)


def wgmma_a_layout(rows: int) -> Any:
    """A's shared tile [rows, BK] as wgmma reads it (module docstring): K-major rows of 128
    bytes, 16-byte chunks XOR-permuted by row % 8 (the hardware's 128-byte swizzle)."""
    return swizzle(row_major(rows, BK), vector=8, period=8)


def wgmma_b_layout(bn: int) -> Any:
    """B's shared tile [BK, bn] as wgmma reads it (module docstring): panels of 64 columns,
    each swizzled like A. Also what the warp-specialized template's TMA writes."""
    return row_major(1, bn // 64) * swizzle(row_major(BK, 64), vector=8, period=8)


def wgmma_tile_copies(rows: int, bn: int, threads: int) -> tuple:
    """(A's layout, B's layout, A's copy, B's copy): the shared tiles [rows, BK] and [BK, bn]
    as wgmma reads them, and how `threads` threads fill them in 16-byte cp.async chunks
    (`cuda_smem_offsets.tile_copy`); this template's and the skinny one's."""
    sa_layout, sb_layout = wgmma_a_layout(rows), wgmma_b_layout(bn)
    return sa_layout, sb_layout, tile_copy(sa_layout, rows, BK, threads, 8), tile_copy(sb_layout, BK, bn, threads, 8)


def wgmma_k_steps(acc: Any, sa: Any, a_base: Any, sb: Any, b_base: Any, group: Any, m_tiles: int, bn: int,
                  dtype: str, sb_layout: Any) -> Any:
    """The wgmma instructions of one stage's BK slice (its A and B tiles start at
    `a_base` and `b_base` of the shared tensors): for each 16-deep step, B's descriptor
    once and one wgmma per 64-row A tile of warpgroup `group`. A lies in 128-byte-
    swizzled rows of BK, B in swizzled panels of 64 columns (descriptor offsets: the
    next 64 columns, the next 8 rows of K; on the H200 the two swapped gave a relative
    error of 1.2, as they should). Shared with the warp-specialized template, whose
    TMA writes the same layouts."""
    from hidet_plugin_cuda import hopper as hw

    out = []
    for kk in range(BK // 16):
        b_op = hw.wgmma_operand(sb[b_base + sb_layout.offset(kk * 16, 0)], BK * 64 * 2, 8 * 64 * 2)
        for mi in range(m_tiles):
            row0 = (group * m_tiles + mi) * 64
            a_op = hw.wgmma_operand(sa[a_base + row0 * BK + kk * 16], 16, 8 * BK * 2)
            out.append(hw.wgmma_mma_async(acc[mi, :], a_op, b_op, bn, dtype, trans_b=True))
    return seq_of(out)


def wgmma_tile_begin(pinned: list, count: int, ahead: int, mmas: Any) -> Any:
    """A k-tile of the cp.async + wgmma pipelines (this template's and the skinny one's,
    `cuda_hopper_skinny`), up to its wgmmas: wait for its copies (at most `ahead` - 1
    newer groups still in flight), make them visible to the async proxy, barrier, then
    the wgmmas `mmas` after the accumulators' pin (`pinned`, `count` registers) and the
    fence, committed as one group. The kernel then issues the copies of the k-tile
    `ahead` on and calls `wgmma_tile_end`."""
    from hidet_framework.ir.stmt import EvaluateStmt
    from hidet_plugin_cuda import hopper as hw
    from hidet_plugin_cuda import lang as cu

    return seq_of([cu.cp_async_wait_group(ahead - 1), hw.fence_proxy_async(), EvaluateStmt(cu.syncthreads()),
                   hw.wgmma_pin_registers(pinned, count), hw.wgmma_fence(), mmas, hw.wgmma_commit_group()])


def wgmma_tile_end(pinned: list, count: int) -> Any:
    """The end of a k-tile (`wgmma_tile_begin`): wait for its wgmmas and pin the
    accumulators again. (Leaving the group running while the next is issued made ptxas
    serialise every wgmma, C7514, in our tries: each k-tile's group is waited for here.)"""
    from hidet_plugin_cuda import hopper as hw

    return seq_of([hw.wgmma_wait_group(0), hw.wgmma_pin_registers(pinned, count)])


def build_wgmma_kernel(ops: MatmulOperands, dtype: str, params: Mapping[str, Any], name: str):
    from hidet_plugin_cuda import hopper as hw
    from hidet_plugin_cuda import lang as cu

    cfg = wgmma_config(params)
    bm, bn, threads, stages = cfg["bm"], cfg["bn"], cfg["threads"], params["stages"]
    m_tiles = params["m_tiles"]
    m, n, k, batch = ops.m, ops.n, ops.k, ops.batch
    tiles = max(1, ceil_div(k, BK))
    grid_n, grid_m = ceil_div(n, bn), ceil_div(m, bm)
    a_size, b_size = bm * BK, BK * bn
    dt = DTypeAnnotation(data_type(dtype))
    sa_layout, sb_layout, a_copy, b_copy = wgmma_tile_copies(bm, bn, threads)
    a_origin, a_deltas, sta_plan = a_copy.origin, a_copy.deltas, a_copy.plan
    b_origin, b_deltas, stb_plan = b_copy.origin, b_copy.deltas, b_copy.plan
    m_whole, n_whole, k_whole = m % bm == 0, n % bn == 0, k % BK == 0

    def copy_tiles(a, b, sa, sb, sta_off, stb_off, stage, kbase, m0, n0, bz, ai, aj, bi, bj):
        return seq_of([
            cp_async_tile(sa, stage * a_size, sta_off, sta_plan, a_deltas, m0 + ai, kbase + aj, (m, k),
                          (m_whole, k_whole), lambda r, c: a[ops.a_index(bz, r, c)]),
            cp_async_tile(sb, stage * b_size, stb_off, stb_plan, b_deltas, kbase + bi, n0 + bj, (k, n),
                          (k_whole, n_whole), lambda r, c: b[ops.b_index(bz, r, c)])])

    def multiply(acc, sa, sb, stage, group):
        return wgmma_k_steps(acc, sa, stage * a_size, sb, stage * b_size, group, m_tiles, bn, dtype, sb_layout)

    acc_regs = cfg["acc"]
    ahead = stages - 1  # k-tiles in flight from global memory

    def acc_list(acc):
        return [acc[mi, j] for mi in range(m_tiles) for j in range(bn // 2)]

    @script
    def matmul_wgmma(a: dt[ops.a_shape], b: dt[ops.b_shape], c: dt[ops.c_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = (grid_n, grid_m, batch)
        attrs.cuda.block_dim = threads
        attrs.cuda.dynamic_smem_bytes = stages * (a_size + b_size) * 2
        sa = cu.dynamic_shared_tensor(dt, [stages * a_size], 0)
        sb = cu.dynamic_shared_tensor(dt, [stages * b_size], stages * a_size * 2)
        acc = register_tensor(f32, [m_tiles, bn // 2])
        sta_off = register_tensor(i32, [len(sta_plan.bases)])
        stb_off = register_tensor(i32, [len(stb_plan.bases)])
        tid = cu.threadIdx.x
        bz = cu.blockIdx.z
        m_tile, n_tile = block_tile(cu.blockIdx.x, cu.blockIdx.y, grid_n, grid_m, params["raster"])
        m0 = m_tile * bm
        n0 = n_tile * bn
        group = tid // 128
        a_copy.store_offsets(sta_off, sa_layout, tid)
        b_copy.store_offsets(stb_off, sb_layout, tid)
        ai, aj = a_origin(tid)
        bi, bj = b_origin(tid)
        for mi in static_range(m_tiles):
            for j in static_range(bn // 2):
                acc[mi, j] = 0.0
        hw.wgmma_pin_registers(acc_list(acc), acc_regs)
        for s in static_range(ahead):
            if s < tiles:
                copy_tiles(a, b, sa, sb, sta_off, stb_off, s, s * BK, m0, n0, bz, ai, aj, bi, bj)
            cu.cp_async_commit_group()
        for kt in range(tiles):
            wgmma_tile_begin(acc_list(acc), acc_regs, ahead, multiply(acc, sa, sb, kt % stages, group))
            if kt + ahead < tiles:
                copy_tiles(a, b, sa, sb, sta_off, stb_off, (kt + ahead) % stages, (kt + ahead) * BK,
                           m0, n0, bz, ai, aj, bi, bj)
            cu.cp_async_commit_group()
            wgmma_tile_end(acc_list(acc), acc_regs)
        lane = tid % 32
        warp = tid % 128 // 32
        for mi in static_range(m_tiles):
            for j in static_range(bn // 8):
                for e in static_range(4):
                    row = m0 + (group * m_tiles + mi) * 64 + warp * 16 + lane // 4 + e // 2 * 8
                    col = n0 + j * 8 + lane % 4 * 2 + e % 2
                    if guard([(m_whole, row < m), (n_whole, col < n)]):
                        c[ops.c_index(bz, row, col)] = acc[mi, j * 4 + e]

    return matmul_wgmma
