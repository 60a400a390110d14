"""CUDA fp16 / bf16 matmul for short M on Hopper's warpgroup tensor cores (wgmma,
sm_90a), with the roles of M and N swapped, and split-K.

wgmma multiplies m64 x nN tiles with N a multiple of 8 up to 256. For C = A @ B with
M of 16 to 256 rows, the kernel computes C^T = B^T @ A^T: the 64-row side of the
instruction runs along N (columns of C, thousands of them) and its N side along M
(rounded up to `mp`, a multiple of 16 per warpgroup), so no tensor-core work is
wasted on rows that do not exist, as it is with a 64- or 128-row block tile.

- wgmma's A operand is a [64 n, 16 k] slice of B, read "MN-major" (n contiguous, the
  transposed-A flag): B's tile [64 k, 64 n] is one 128-byte-swizzled block per
  warpgroup, exactly as `cuda_wgmma` stores its B (stride offset 1024 for the next 8
  rows of K, start advanced 2048 bytes per k16 step);
- wgmma's B operand is A^T, i.e. A's tile [mp, 64 k] K-major, 128-byte swizzled, as
  `cuda_wgmma` stores its A (stride offset 1024, start advanced 32 bytes per k16);
- a block is `warpgroups` warpgroups side by side along N (64 columns each) times
  `k_groups` along K: k-group g multiplies k-tiles g, g + k_groups, ... of the block's
  slice of K, and at the end the groups add their accumulators through shared memory
  (one launch, where split-K needs two); `split` slices of K over blocks write partial
  sums to an fp32 workspace [split, batch, M, N] and a second launch adds them;
- cp.async fills a `stages`-deep pipeline of 64-deep k-tiles per k-group (rows of A
  and B 16-byte aligned: K % 8 == 0 and N % 8 == 0); a candidate whose pipeline does not
  fit the shared memory at this M runs with fewer stages, and below 2 stages with fewer
  k-groups, so every candidate builds for every shape the template applies to.

The accumulators of a warpgroup hold C^T[64, mp]: register 4j + e of thread (warp w,
lane l) is column n0 + 16w + l // 4 + 8 (e // 2) and row 8j + 2 (l % 4) + e % 2 of C;
stores are guarded tensor-element stores (a graftable epilogue). The space comes from
the target: warpgroups per block, pipeline depth within shared memory per block,
split factors. Cost model (`cuda_defaults`): `skinny_kernel` describes a candidate,
`estimate` prices it (the tuner's level-2 cut ranks by it) and `skinny_auto` gives the
modelled best of level 2, which ``{"auto": 1}`` resolves to when a caller asks for it;
the template stays at priority 0 (never the level-0 default): the modelled default has
not run on a GPU yet (session 6: W2 did not happen). W1 measured its split-8 candidate
fastest at 128x768x3072 (6.65 us, cuBLAS 7.85).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hidet_framework.ir.dtypes import data_type
from hidet_framework.lang import attrs, f32, i32, register_tensor, script, script_module, static_range
from hidet_framework.lang.annotations import DTypeAnnotation
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

from hidet_plugin_matmul.cuda_defaults import (AUTO, Gemm, Gpu, Kernel, choose, is_auto, modelled_seconds, resolve,
                                               tile_efficiency)
from hidet_plugin_matmul.cuda_ir_builders import cp_async_tile, guard, seq_of
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, target_int, task_dtype
from hidet_plugin_matmul.cuda_wgmma import wgmma_tile_begin, wgmma_tile_copies, wgmma_tile_end
from hidet_plugin_matmul.cuda_stage_operands import prologue_inputs
from hidet_plugin_matmul.operators import MatmulOperands

BK = 64  # one 128-byte swizzle row of 16-bit elements
MIN_M, MAX_M = 9, 256  # M of 8 or fewer: cuda_gemv; wgmma's N side ends at 256
DEFAULT = {"warpgroups": 1, "k_groups": 2, "stages": 4, "split": 1}
DESIGN_M = 128  # the M the space is checked at (registers, shared memory); larger M: fewer stages
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
REGS_BESIDE_ACC = 40  # registers a thread needs besides its accumulators (ptxas: 128 left for 128 acc fails)


def skinny_config(params: Mapping[str, Any], m: int = DESIGN_M, smem_limit: int = 227 * 1024,
                  regs_per_block: int = 65536) -> dict:
    """Derived sizes at M = `m`. Where two stages of every k-group do not fit in shared
    memory, or the block's threads leave too few registers for the accumulators (large
    M), the k-groups halve until they do (one group always fits): every candidate
    builds for every shape the template applies to."""
    wg, kg = params["warpgroups"], params.get("k_groups", 1)
    mp = ceil_div(m, 16 * wg) * 16 * wg  # A tile rows: whole 16-byte chunks for every thread
    bn = 64 * wg

    def stage(groups: int) -> int:  # bytes of one pipeline stage, every k-group
        return groups * (mp + bn) * BK * 2

    def registers_short(groups: int) -> bool:  # accumulators + ~40 for addresses and loop state
        return mp // 2 + REGS_BESIDE_ACC > min(255, regs_per_block // (128 * wg * groups))

    while kg > 1 and (smem_limit // stage(kg) < 2 or registers_short(kg)):
        kg //= 2
    stages = max(0, min(params["stages"], smem_limit // stage(kg)))
    red = (kg - 1) * mp // 2 * 128 * wg * 4  # k-groups 1.. hand their accumulators to group 0
    return {"threads": 128 * wg * kg, "bn": bn, "mp": mp, "acc": mp // 2, "stages": stages, "k_groups": kg,
            "smem": max(stages * stage(kg), red)}


def skinny_legal(params: Mapping[str, Any], target: Any) -> bool:
    limit = target_int(target, "smem_per_block_optin", 227 * 1024)
    regs_per_block = target_int(target, "regs_per_block", 65536)
    cfg = skinny_config(params, DESIGN_M, limit, regs_per_block)
    regs = min(255, regs_per_block // cfg["threads"])
    return (cfg["stages"] == params["stages"] and cfg["k_groups"] == params.get("k_groups", 1)
            and cfg["smem"] <= limit and cfg["acc"] <= 128
            and cfg["acc"] + REGS_BESIDE_ACC <= regs and cfg["threads"] <= target_int(target, "max_threads_per_block", 1024))


def skinny_splits(params: Mapping[str, Any], k: int, k_groups: int) -> int:
    """The split-K factor a candidate runs with at depth `k` (the kernel's own rule:
    whole k-tiles per k-group in every slice)."""
    tiles_all = max(1, ceil_div(k, BK))
    tiles = ceil_div(ceil_div(tiles_all, params["split"]), k_groups) * k_groups
    return ceil_div(tiles_all, tiles)


def skinny_kernel(params: Mapping[str, Any], ops: MatmulOperands, target: Any) -> Kernel:
    """A candidate as the cost model sees it (`cuda_defaults`): a block tile of mp x 64
    warpgroups, a k-step of k_groups k-tiles with k_groups (stages - 1) loads in flight."""
    from hidet_plugin_matmul.cuda_wgmma import WGMMA_RATE

    cfg = skinny_config(params, ops.m, target_int(target, "smem_per_block_optin", 227 * 1024),
                        target_int(target, "regs_per_block", 65536))
    kg = max(1, cfg["k_groups"])
    return Kernel(cfg["mp"], cfg["bn"], BK * kg, cfg["threads"], cfg["smem"], cfg["acc"] + REGS_BESIDE_ACC,
                  kg * (cfg["stages"] - 1) + 1, skinny_splits(params, ops.k, kg),
                  WGMMA_RATE * tile_efficiency(64, cfg["mp"], 8))


def skinny_auto(ops: MatmulOperands, elem: int, target: Any) -> tuple[dict, float]:
    """The default's parameters for this shape and their modelled seconds."""
    return choose(skinny_space(target, 2), lambda p: None if is_auto(p) else skinny_kernel(p, ops, target),
                  Gemm(ops.m, ops.n, ops.k, ops.batch, elem), target)


def skinny_space(target: Any, level: int) -> list[dict]:
    if getattr(target, "arch", None) not in ("sm_90", "sm_90a"):
        return []
    out = [DEFAULT]

    def add(p: dict) -> None:
        if p not in out and skinny_legal(p, target):
            out.append(p)

    if level == 0:
        return out

    groups = ((1, 1), (1, 2), (1, 4), (2, 1), (2, 2))
    if level == 1:  # the deepest pipeline up to 4 that fits, for each arrangement
        for wg, kg in groups:
            st = next((x for x in (4, 3, 2) if skinny_legal({"warpgroups": wg, "k_groups": kg, "stages": x,
                                                              "split": 1}, target)), None)
            for split in (1, 2, 4, 8, 16) if st else ():
                add({"warpgroups": wg, "k_groups": kg, "stages": st, "split": split})
        for wg, kg in groups[:2]:
            add({"warpgroups": wg, "k_groups": kg, "stages": 3, "split": 1})
        return out[:30]
    for wg, kg in groups + ((2, 4),):
        for st in (2, 3, 4, 6):
            for split in SPLITS:
                add({"warpgroups": wg, "k_groups": kg, "stages": st, "split": split})
    return out


def build_skinny_module(ops: MatmulOperands, dtype: str, params: Mapping[str, Any], name: str, smem_limit: int):
    from hidet_plugin_cuda import hopper as hw
    from hidet_plugin_cuda import lang as cu

    m, n, k, batch = ops.m, ops.n, ops.k, ops.batch
    cfg = skinny_config(params, m, smem_limit)
    wg, kg = params["warpgroups"], cfg["k_groups"]
    threads, bn, mp, stages = cfg["threads"], cfg["bn"], cfg["mp"], cfg["stages"]
    if stages < 2 or cfg["smem"] > smem_limit:
        raise ValueError(f"{name}: two pipeline stages of {mp} + {bn} rows exceed {smem_limit} bytes of "
                         f"shared memory")
    per_group = 128 * wg  # threads of one k-group
    tiles_all = max(1, ceil_div(k, BK))
    tiles = ceil_div(ceil_div(tiles_all, params["split"]), kg) * kg  # k-tiles of a slice, kg | tiles
    splits = ceil_div(tiles_all, tiles)
    tiles_g = tiles // kg  # k-tiles of one k-group
    grid_n = ceil_div(n, bn)
    a_size, b_size = mp * BK, BK * bn
    dt = DTypeAnnotation(data_type(dtype))
    sa_layout, sb_layout, a_copy, b_copy = wgmma_tile_copies(mp, bn, per_group)
    a_origin, a_deltas, sta_plan = a_copy.origin, a_copy.deltas, a_copy.plan
    b_origin, b_deltas, stb_plan = b_copy.origin, b_copy.deltas, b_copy.plan
    m_whole, n_whole = m == mp, n % bn == 0
    k_whole = k % BK == 0 and tiles * splits == tiles_all
    out_dt = f32 if splits > 1 else dt
    out_shape = (splits, batch, m, n) if splits > 1 else ops.c_shape
    ahead = stages - 1
    acc_n = mp // 2
    others = list(range(1, kg))

    def out_index(s, bz, row, col):
        return (s, bz, row, col) if splits > 1 else ops.c_index(bz, row, col)

    def copy_tiles(a, b, sa, sb, sta_off, stb_off, sub, kbase, n0, bz, ai, aj, bi, bj):
        return seq_of([
            cp_async_tile(sa, sub * a_size, sta_off, sta_plan, a_deltas, ai, kbase + aj, (m, k),
                          (m_whole, k_whole), lambda r, c: a[ops.a_index(bz, r, c)]),
            cp_async_tile(sb, sub * b_size, stb_off, stb_plan, b_deltas, kbase + bi, n0 + bj, (k, n),
                          (k_whole, n_whole), lambda r, c: b[ops.b_index(bz, r, c)])])

    def multiply(acc, sa, sb, sub, group):
        out = []
        for kk in range(BK // 16):
            # A operand: B^T, this warpgroup's 64 columns, MN-major; B operand: A^T, K-major
            bt = hw.wgmma_operand(sb[sub * b_size + sb_layout.offset(kk * 16, 0) + group * 64 * BK],
                                  BK * 64 * 2, 8 * 64 * 2)
            at = hw.wgmma_operand(sa[sub * a_size + kk * 16], 16, 8 * BK * 2)
            out.append(hw.wgmma_mma_async(acc, bt, at, mp, dtype, trans_a=True, trans_b=False))
        return seq_of(out)

    def acc_list(acc):
        return [acc[j] for j in range(acc_n)]

    @script
    def matmul_wgmma_skinny(a: dt[ops.a_shape], b: dt[ops.b_shape], out: out_dt[out_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = (grid_n, splits, batch)
        attrs.cuda.block_dim = threads
        attrs.cuda.dynamic_smem_bytes = cfg["smem"]
        sa = cu.dynamic_shared_tensor(dt, [stages * kg * a_size], 0)
        sb = cu.dynamic_shared_tensor(dt, [stages * kg * b_size], stages * kg * a_size * 2)
        acc = register_tensor(f32, [acc_n])
        sta_off = register_tensor(i32, [len(sta_plan.bases)])
        stb_off = register_tensor(i32, [len(stb_plan.bases)])
        tid = cu.threadIdx.x
        local = tid % per_group
        gk = tid // per_group  # k-group: k-tiles gk, gk + kg, ... of this block's slice
        bz = cu.blockIdx.z
        s = cu.blockIdx.y
        n0 = cu.blockIdx.x * bn
        kt0 = s * tiles + gk
        group = local // 128
        a_copy.store_offsets(sta_off, sa_layout, local)
        b_copy.store_offsets(stb_off, sb_layout, local)
        ai, aj = a_origin(local)
        bi, bj = b_origin(local)
        for j in static_range(acc_n):
            acc[j] = 0.0
        hw.wgmma_pin_registers(acc_list(acc), acc_n)
        for st in static_range(ahead):
            if st < tiles_g:
                copy_tiles(a, b, sa, sb, sta_off, stb_off, st * kg + gk, (kt0 + st * kg) * BK, n0, bz, ai, aj,
                           bi, bj)
            cu.cp_async_commit_group()
        for kt in range(tiles_g):
            wgmma_tile_begin(acc_list(acc), acc_n, ahead, multiply(acc, sa, sb, kt % stages * kg + gk, group))
            if kt + ahead < tiles_g:
                copy_tiles(a, b, sa, sb, sta_off, stb_off, (kt + ahead) % stages * kg + gk,
                           (kt0 + (kt + ahead) * kg) * BK, n0, bz, ai, aj, bi, bj)
            cu.cp_async_commit_group()
            wgmma_tile_end(acc_list(acc), acc_n)
        if kg > 1:  # k-groups 1.. hand their sums to group 0 through the (now idle) shared memory
            red = cu.dynamic_shared_tensor(f32, [(kg - 1) * acc_n * per_group], 0)
            cu.syncthreads()
            if gk > 0:
                for j in static_range(acc_n):
                    red[((gk - 1) * acc_n + j) * per_group + local] = acc[j]
            cu.syncthreads()
            if gk == 0:
                for g in others:
                    for j in static_range(acc_n):
                        acc[j] = acc[j] + red[((g - 1) * acc_n + j) * per_group + local]
        lane = tid % 32
        warp = local % 128 // 32
        if kg == 1 or gk == 0:
            for j in static_range(mp // 8):
                for e in static_range(4):
                    col = n0 + group * 64 + warp * 16 + lane // 4 + e // 2 * 8
                    row = j * 8 + lane % 4 * 2 + e % 2
                    if guard([(m_whole or (j + 1) * 8 <= m, row < m), (n_whole, col < n)]):
                        out[out_index(s, bz, row, col)] = acc[j * 4 + e]

    kernels = [matmul_wgmma_skinny]
    if splits > 1:
        from hidet_plugin_matmul.cuda_tensor_core_kernel import build_split_reduce

        kernels.append(build_split_reduce(ops, dt, splits, name + "_reduce"))
    return script_module(*kernels, name=name), splits


class CudaHopperSkinnyMatmul(Template):
    """Short-M fp16/bf16 matmul with wgmma, M and N swapped; see the module docstring."""

    name = "matmul.cuda_hopper_skinny"
    operator = "matmul"
    target = "cuda"
    version = "1"
    priority = 0  # never the level-0 default (its modelled default, `skinny_auto`, has not run on a GPU)

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        ops = MatmulOperands(attributes)
        return (task_dtype(task) in ("float16", "bfloat16") and MIN_M <= ops.m <= MAX_M
                and ops.k % 8 == 0 and ops.n % 8 == 0)

    def space(self, target: Any, level: int) -> list[dict]:
        return skinny_space(target, level)

    def estimate(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> float:
        """Modelled seconds of `params` (the default: of the candidate it resolves to);
        infinite for an anchor whose A or B takes a prologue (cp.async cannot graft it)."""
        ops, elem = MatmulOperands(attributes), data_type(task_dtype(task)).nbytes
        if prologue_inputs(attributes):
            return math.inf
        if is_auto(params):
            return skinny_auto(ops, elem, target)[1]
        return modelled_seconds(Gemm(ops.m, ops.n, ops.k, ops.batch, elem),
                                skinny_kernel(dict(DEFAULT, **params), ops, target), Gpu.from_target(target))

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        ops = MatmulOperands(attributes)
        dtype = task_dtype(task)
        if not self.applies(task, attributes):
            raise ValueError(f"{self.name}: needs fp16/bf16, {MIN_M} <= M <= {MAX_M}, K and N multiples of 8; "
                             f"got {dtype} M={ops.m} K={ops.k} N={ops.n}")
        p = dict(DEFAULT, **resolve(params, lambda: skinny_auto(ops, data_type(dtype).nbytes, target)[0]))
        name = (f"matmul_wgmma_skinny_{dtype}_{ops.key()}_wg{p['warpgroups']}x{p['k_groups']}_s{p['stages']}"
                f"_sk{p['split']}")
        module, splits = build_skinny_module(ops, dtype, p, name, target_int(target, "smem_per_block_optin",
                                                                             227 * 1024))
        a, b, c = BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)
        if splits == 1:
            return ScheduledTask(module, (Launch(name, (a, b, c)),), (), source=self.name, params=p)
        ws = BufferRef("workspace", 0)
        workspace = (WorkspaceSpec("matmul_split_k_partials", "float32", (splits, ops.batch, ops.m, ops.n)),)
        launches = (Launch(name, (a, b, ws)), Launch(name + "_reduce", (ws, c)))
        return ScheduledTask(module, launches, workspace, source=self.name, params=p)
