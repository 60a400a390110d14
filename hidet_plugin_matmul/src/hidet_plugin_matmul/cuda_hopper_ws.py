"""CUDA fp16 / bf16 matmul on Hopper: TMA loads, warp specialisation, a persistent grid.

One block per multiprocessor (at most) walks the output tiles ``t = blockIdx.x,
blockIdx.x + grid, ...`` (tile order: rows of N tiles, or with ``raster`` columns of
`raster` M tiles, as `cuda_ir_builders.block_tile`). Its warpgroups have two roles:

- the **producer** (the last warpgroup; one thread works) issues, for every k-tile of
  every tile the block owns, the bulk tensor copies (``cp.async.bulk.tensor``) of the A
  tile [BM, 64] and of B's [64, BN] as BN/64 boxes of 64 x 64, into stage ``i % stages``
  of a ring of shared buffers, after waiting for that stage's *empty* mbarrier; the
  copies complete on the stage's *full* mbarrier (``expect_tx`` of the stage's bytes).
  The tensor maps are kernel parameters (`hopper.tensor_map_param`), encoded by the
  runtime from the bound buffers; their 128-byte swizzle puts each 64-element row at
  128 bytes with its 16-byte chunks XOR-ed by row % 8, the layout `cuda_wgmma` reads.
  Boxes past the edges of A or B are zero-filled, so any M, N and K work (rows 16-byte
  aligned: K and N multiples of 8).
- the **consumers** (warpgroups 0 .. consumers-1, each 64 * m_tiles rows of the tile)
  wait for a stage's full barrier, issue its 4 * m_tiles ``wgmma m64nBNk16``, commit,
  and wait until at most one group is pending (``wgmma.wait_group 1``): the k-tile
  before it is then finished and its stage is released (lane 0 of every consumer warp
  arrives on the empty barrier, after its own wait). The tensor cores so always have
  the next group queued. At a tile's end: wait for all, then the epilogue, zero the
  accumulators.

The epilogue writes C with guarded tensor-element stores (graftable for fusion, as in
every template). Staged (``epilogue: 1``, the default): each warp rounds its 16 rows a
64-column chunk at a time into its own 16 x 72 shared chunk (pairs of columns a 32-bit
store, `hopper.st_shared_pair`), ``__syncwarp``, and stores rows of 32 consecutive
elements, one cache line a warp instruction instead of the fragment's 8 (measured
~12 us less a 128 x 256 tile on the H200). Direct (``0``, and split-K's fp32
partials): from the fragments. ``split`` > 1: work units are (K slice, tile), the
partials go to an fp32 workspace and a second launch adds them.

With two consumer warpgroups the producer gives registers away (``setmaxnreg``: 40 for
it, 232 for the consumers) under ``__launch_bounds__(384, 1)``. The space and the cost
model's view are in `cuda_hopper_ws_space`.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.type_infer import cast_if_needed
from hidet_framework.lang import attrs, f32, register_tensor, script, script_module, shared_tensor, static_range, u64
from hidet_framework.lang.annotations import DTypeAnnotation
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

from hidet_plugin_matmul.cuda_ir_builders import block_tile, guard, select, seq_of, store
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, target_int, task_dtype
from hidet_plugin_matmul.cuda_defaults import Gemm, Gpu, is_auto, modelled_seconds, resolve
from hidet_plugin_matmul.cuda_hopper_ws_space import (BK, DEFAULT, EPI_PITCH, PRODUCER_REGS, CONSUMER_REGS,  # noqa: F401
                                                       model_opted_in, ws_auto, ws_config, ws_kernel, ws_legal, ws_space,
                                                       ws_splits)
from hidet_plugin_matmul.cuda_stage_operands import prologue_inputs
from hidet_plugin_matmul.cuda_wgmma import wgmma_b_layout, wgmma_k_steps
from hidet_plugin_matmul.operators import MatmulOperands

def ws_tile(t: Any, rank: Any, grid_n: int, unit_m: int, batch: int, raster: int, cl: int) -> tuple:
    """(batch, M tile, N tile) of work unit `t` (IR or int) for the block of rank `rank`
    in its cluster: units are numbered by `block_tile` over (unit_m, grid_n) per batch
    entry, and a unit is `cl` M tiles (rank r takes M tile cl * unit + r)."""
    per_batch = grid_n * unit_m
    within = t % per_batch if batch > 1 else t
    bz = t // per_batch if batch > 1 else 0
    m_unit, n_tile = block_tile(within % grid_n, within // grid_n, grid_n, unit_m, raster)
    return bz, (m_unit * cl + rank if cl > 1 else m_unit), n_tile


class CudaHopperWsMatmul(Template):
    """fp16/bf16 matmul, TMA + warp-specialised wgmma, persistent (sm_90a); see the module docstring."""

    name = "matmul.cuda_hopper_ws"
    operator = "matmul"
    target = "cuda"
    version = "1"
    priority = 2  # below cuda_wgmma (3) until the GPU measurements say otherwise

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        ops = MatmulOperands(attributes)
        return task_dtype(task) in ("float16", "bfloat16") and ops.k % 8 == 0 and ops.n % 8 == 0

    def space(self, target: Any, level: int) -> list[dict]:
        return ws_space(target, level)

    def estimate(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> Any:
        """Modelled seconds of `params` (``auto``: of the candidate it resolves to); None
        (no model: the template competes by priority) unless `model_opted_in`."""
        if not model_opted_in():
            return None
        ops, elem = MatmulOperands(attributes), data_type(task_dtype(task)).nbytes
        if prologue_inputs(attributes):  # the TMA reads A and B, not the IR's loads: no prologue graft
            return math.inf
        if is_auto(params):
            return ws_auto(ops.m, ops.n, ops.k, ops.batch, elem, target)[1]
        gpu = Gpu.from_target(target)
        return modelled_seconds(Gemm(ops.m, ops.n, ops.k, ops.batch, elem), ws_kernel(params, ops.k), gpu)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        ops = MatmulOperands(attributes)
        dtype = task_dtype(task)
        params = resolve(params, lambda: ws_auto(ops.m, ops.n, ops.k, ops.batch, data_type(dtype).nbytes, target)[0])
        p = dict(DEFAULT, **params)
        if ws_splits(ops.k, p["split"]) == 1:  # K too short to slice: the unsplit kernel
            p["split"] = 1
        if ops.k % 8 or ops.n % 8:
            raise ValueError(f"{self.name}: rows of A and B must be 16-byte aligned (K, N multiples of 8), "
                             f"got K={ops.k}, N={ops.n}")
        if not ws_legal(p, target):
            raise ValueError(f"{self.name}: {p} does not fit (registers, shared memory or the 256-row box)")
        name = (f"matmul_hopper_ws_{dtype}_{ops.key()}_c{p['consumers']}x{p['m_tiles']}_n{p['block_n']}"
                f"_s{p['stages']}{'_r%d' % p['raster'] if p['raster'] else ''}"
                f"{'_cl%d' % p['cluster'] if p['cluster'] > 1 else ''}{'_e0' if not p['epilogue'] else ''}"
                f"{'_sk%d' % p['split'] if p['split'] > 1 else ''}{'_np' if not p['persistent'] else ''}")
        sms = target_int(target, "sm_count", 132)
        splits = ws_splits(ops.k, p["split"])
        kernel = build_ws_kernel(ops, dtype, p, name, sms)
        a, b, c = BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)
        if splits == 1:
            return ScheduledTask(script_module(kernel, name=name), (Launch(name, (a, b, c)),), (),
                                 source=self.name, params=p)
        from hidet_plugin_matmul.cuda_tensor_core_kernel import build_split_reduce

        module = script_module(kernel, build_split_reduce(ops, DTypeAnnotation(data_type(dtype)), splits,
                                                          name + "_reduce"), name=name)
        ws = BufferRef("workspace", 0)
        workspace = (WorkspaceSpec("matmul_split_k_partials", "float32", (splits, ops.batch, ops.m, ops.n)),)
        launches = (Launch(name, (a, b, ws)), Launch(name + "_reduce", (ws, c)))
        return ScheduledTask(module, launches, workspace, source=self.name, params=p)


def build_ws_kernel(ops: MatmulOperands, dtype: str, params: Mapping[str, Any], name: str, sms: int):
    from hidet_plugin_cuda import hopper as hw
    from hidet_plugin_cuda import lang as cu

    cfg = ws_config(params)
    bm, bn, threads, stages = cfg["bm"], cfg["bn"], cfg["threads"], params["stages"]
    m_tiles, consumers, raster, cl = params["m_tiles"], params["consumers"], params["raster"], params["cluster"]
    m, n, k, batch = ops.m, ops.n, ops.k, ops.batch
    k_tiles = max(1, ceil_div(k, BK))
    grid_n, grid_m = ceil_div(n, bn), ceil_div(m, bm)
    # work units: tiles, or with clusters pairs of tiles along M (rank r takes M tile 2 pm + r)
    unit_m = ceil_div(grid_m, cl)
    per_batch = grid_n * unit_m
    units = per_batch * batch
    splits = ws_splits(k, params.get("split", 1))
    tps = ceil_div(k_tiles, splits)  # k-tiles of a slice (the last may have fewer)
    # persistent: one block a multiprocessor (a cluster's blocks must all fit at once, and
    # the hardware may co-schedule fewer clusters than sms / cl); else one block a unit
    grid = (min(units * splits, sms // cl) if params.get("persistent", 1) else units * splits) * cl
    # as ws_config sizes shared memory: by the asked split (a K too short for it still
    # gets the direct epilogue, there being no staging chunks)
    staged = cfg["smem"] > cfg["ring"]
    c_shape = (splits, batch, m, n) if splits > 1 else ops.c_shape
    a_size, b_size = bm * BK, BK * bn
    stage_bytes = (a_size + b_size) * 2
    consumer_warps = 4 * consumers  # lane 0 of each consumer warp releases a stage
    dt = DTypeAnnotation(data_type(dtype))
    dt_ir = data_type(dtype)
    c_dt = f32 if splits > 1 else dt
    sb_layout = wgmma_b_layout(bn)
    m_whole, n_whole = m % bm == 0 and grid_m % cl == 0, n % bn == 0
    a_box = (1,) * (len(ops.a_shape) - 2) + (bm, BK)
    b_box = (1,) * (len(ops.b_shape) - 2) + (BK, 64)
    set_regs = consumers == 2

    def tile_coords(u, rank):
        """(slice, batch, M tile, N tile, first k-tile, k-tiles) of work unit u."""
        t = u % units if splits > 1 else u
        sk = u // units if splits > 1 else 0
        bz, m_tile, n_tile = ws_tile(t, rank, grid_n, unit_m, batch, raster, cl)
        if splits == 1:
            return sk, bz, m_tile, n_tile, 0, k_tiles
        from hidet_framework.ir.expr import equal

        last = k_tiles - (splits - 1) * tps
        return sk, bz, m_tile, n_tile, sk * tps, tps if last == tps else select(equal(sk, splits - 1), last, tps)

    def coords(index):  # TMA coordinates are innermost first
        return tuple(reversed(index))

    def load_stage(sa, sb, bars, a_map, b_map, s, kt, bz, m_tile, n_tile, rank):
        """A's box; B's 64-column boxes, with clusters each block's share of them sent
        to both blocks (they compute the same N tile)."""
        from hidet_framework.ir.expr import equal
        from hidet_framework.ir.stmt import IfStmt

        out = [hw.mbarrier_arrive_expect_tx(bars[s], stage_bytes),
               hw.tma_load(sa[s * a_size], a_map, bars[s], coords(ops.a_index(bz, m_tile * bm, kt * BK)))]
        for j in range(bn // 64):
            load = hw.tma_load(sb[s * b_size + j * BK * 64], b_map, bars[s],
                               coords(ops.b_index(bz, kt * BK, n_tile * bn + j * 64)), (1 << cl) - 1 if cl > 1 else 0)
            out.append(IfStmt(equal(rank, j % cl), load) if cl > 1 else load)
        return seq_of(out)

    def release(bar):
        """Lane 0 of a consumer warp frees a stage: in its block, and with clusters in
        every block of the cluster (their producers write into it too)."""
        return seq_of([hw.mbarrier_arrive_cluster(bar, r) for r in range(cl)]) if cl > 1 else hw.mbarrier_arrive(bar)

    def cluster_sync():
        return hw.cluster_sync() if cl > 1 else seq_of([])

    def multiply(acc, sa, sb, s, group):
        return wgmma_k_steps(acc, sa, s * a_size, sb, s * b_size, group, m_tiles, bn, dtype, sb_layout)

    def acc_list(acc):
        return [acc[mi, j] for mi in range(m_tiles) for j in range(bn // 2)]

    def role_registers(producer: bool):
        return hw.setmaxnreg(PRODUCER_REGS if producer else CONSUMER_REGS, not producer) if set_regs else seq_of([])

    def store_tile(c, sc, acc, sk, bz, m_tile, n_tile, group, warp, lane):
        """The fp32 accumulators to C by guarded tensor-element stores (graftable).
        Direct (epilogue 0): from the wgmma fragment, so a warp's store touches 8 rows.
        Staged (1): each warp passes its 16 rows through its own 16 x 64 chunk of shared
        memory (only __syncwarp between), then a warp's store is 32 consecutive columns."""
        from hidet_framework.ir.stmt import EvaluateStmt

        out = []
        for mi in range(m_tiles):
            row0 = m_tile * bm + (group * m_tiles + mi) * 64 + warp * 16
            if not staged:
                for j in range(bn // 8):
                    for e in range(4):
                        row = row0 + lane // 4 + e // 2 * 8
                        col = n_tile * bn + j * 8 + lane % 4 * 2 + e % 2
                        out.append(guarded_store(c, sk, bz, row, col, acc[mi, j * 4 + e]))
                continue
            buf = (group * 4 + warp) * 16 * EPI_PITCH
            for chunk in range(bn // 64):
                out.append(EvaluateStmt(cu.syncwarp()))  # the warp's reads of the last chunk are done
                for j in range(8):
                    for e in (0, 2):  # columns 2q and 2q + 1 of rows lane/4 and lane/4 + 8: one word
                        at = buf + (lane // 4 + e // 2 * 8) * EPI_PITCH + j * 8 + lane % 4 * 2
                        v = (chunk * 8 + j) * 4 + e
                        out.append(hw.st_shared_pair(sc[at], acc[mi, v], acc[mi, v + 1], dtype))
                out.append(EvaluateStmt(cu.syncwarp()))
                for r in range(16):
                    for h in range(2):
                        col = n_tile * bn + chunk * 64 + h * 32 + lane
                        out.append(guarded_store(c, sk, bz, row0 + r, col, sc[buf + r * EPI_PITCH + h * 32 + lane]))
        return seq_of(out)

    def guarded_store(c, sk, bz, row, col, value):
        from hidet_framework.ir.stmt import IfStmt

        index = (sk, bz, row, col) if splits > 1 else ops.c_index(bz, row, col)
        st = store(c[index], cast_if_needed(value, data_type("float32") if splits > 1 else dt_ir))
        cond = guard([(m_whole, row < m), (n_whole, col < n)])
        return st if cond is True or cond is None else IfStmt(cond, st)

    @script
    def matmul_hopper_ws(a: dt[ops.a_shape], b: dt[ops.b_shape], c: c_dt[c_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = grid
        attrs.cuda.block_dim = threads
        attrs.cuda.min_blocks = 1
        attrs.cuda.cluster_size = cl
        attrs.cuda.dynamic_smem_bytes = cfg["smem"]
        sa = cu.dynamic_shared_tensor(dt, [stages * a_size], 0)
        sb = cu.dynamic_shared_tensor(dt, [stages * b_size], stages * a_size * 2)
        sc = cu.dynamic_shared_tensor(dt, [max(1, consumer_warps * 16 * EPI_PITCH)], cfg["ring"])
        bars = shared_tensor(u64, [2 * stages])  # full[s], then empty[s]
        tid = cu.threadIdx.x
        if tid == 0:
            for s in static_range(stages):
                hw.mbarrier_init(bars[s], 1)
                hw.mbarrier_init(bars[stages + s], consumer_warps * cl)
            hw.fence_mbarrier_init()
        cu.syncthreads()
        cluster_sync()
        rank = cu.blockIdx.x % cl
        group = tid // 128
        if group == consumers:
            role_registers(True)
            if tid % 128 == 0:
                a_map = hw.tensor_map_param(a, a_box)
                b_map = hw.tensor_map_param(b, b_box)
                it = 0
                for t in range(cu.blockIdx.x // cl, units * splits, grid // cl):
                    sk, bz, m_tile, n_tile, kt0, kn = tile_coords(t, rank)
                    for kk in range(kn):
                        kt = kt0 + kk
                        s = it % stages
                        hw.mbarrier_wait(bars[stages + s], ((it // stages) & 1) ^ 1)
                        load_stage(sa, sb, bars, a_map, b_map, s, kt, bz, m_tile, n_tile, rank)
                        it += 1
        else:
            role_registers(False)
            acc = register_tensor(f32, [m_tiles, bn // 2])
            for mi in static_range(m_tiles):
                for j in static_range(bn // 2):
                    acc[mi, j] = 0.0
            lane = tid % 32
            warp = tid % 128 // 32
            it = 0
            for t in range(cu.blockIdx.x // cl, units * splits, grid // cl):
                sk, bz, m_tile, n_tile, kt0, kn = tile_coords(t, rank)
                hw.wgmma_pin_registers(acc_list(acc), cfg["acc"])
                for kt in range(kn):
                    s = it % stages
                    hw.mbarrier_wait(bars[s], (it // stages) & 1)
                    hw.wgmma_fence()
                    multiply(acc, sa, sb, s, group)
                    hw.wgmma_commit_group()
                    hw.wgmma_wait_group(1)
                    if kt > 0 and lane == 0:
                        release(bars[stages + (it + stages - 1) % stages])
                    it += 1
                hw.wgmma_wait_group(0)
                if lane == 0:
                    release(bars[stages + (it + stages - 1) % stages])
                hw.wgmma_pin_registers(acc_list(acc), cfg["acc"])
                store_tile(c, sc, acc, sk, bz, m_tile, n_tile, group, warp, lane)
                for mi in static_range(m_tiles):
                    for j in static_range(bn // 2):
                        acc[mi, j] = 0.0
        cluster_sync()  # no block leaves while its peer may still arrive on its barriers

    return matmul_hopper_ws
