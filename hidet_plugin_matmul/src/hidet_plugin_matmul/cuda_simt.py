"""CUDA fp32 matmul on the SIMT cores (FFMA), written in the script DSL.

Design (one block computes a BM x BN tile of C for one batch entry):

- The C tile is the task mapping
  ``repeat(tm/4, tn/4) * spatial(warps_m, warps_n) * spatial(lanes_m, lanes_n) * repeat(4, 4)``:
  each thread owns (tm/4 x tn/4) chunks of 4 x 4 accumulators; the chunks of one
  thread are a warp tile apart, so the 4 consecutive rows (columns) a thread reads from
  shared memory are one 16-byte load and a warp's reads touch distinct banks.
  Accumulators are a register tensor in the mapping's mirror layout.
- A is staged transposed (``sa[buf, kk, i]``) so a thread's A fragment is contiguous;
  rows are padded by 4 floats so the transposing stores are conflict-free.
- Shared memory is double buffered (``[2] + tile``): the global loads of tile kt+1 go
  to registers at the start of tile kt and to the other buffer at its end, so one
  barrier per k-tile suffices. Fragments are double buffered in registers: the loads
  for step kk+1 are issued before the FMAs of step kk.
- Global reads are tensor-element reads guarded by ``row < m and col < k`` (zero
  otherwise) and stores are guarded tensor-element stores: any M, N, K (primes, 1),
  and the fusion engine can graft prologues/epilogues onto them. v2: a guard the
  static shape makes always true is not emitted (M % BM == 0: no row guard; K % BK
  == 0: no K guard, the prefetch past the last tile is skipped by one uniform branch
  per tile instead), so aligned shapes run with no per-load predicate. The vector and
  cluster forms of the split-K candidates: `cuda_simt_vec`.

The space comes from the target only: thread tiles, warp and lane arrangements, BK,
filtered by registers and shared memory. Default (first at every level):
``{"auto": 1}``, the level-2 candidate with the least modelled time on the target for
the task's shape (`cuda_defaults`; v2's fixed default stays in the space).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.mapping.layout import mapping_register_layout
from hidet_framework.mapping.task_mapping import auto_map, repeat, spatial
from hidet_framework.lang import (
    attrs, f32, register_tensor, script, script_module, shared_tensor, static_range, tensor_pointer,
)
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

from hidet_plugin_matmul.cuda_defaults import (AUTO, Gemm, Gpu, Kernel, choose, is_auto, modelled_seconds,
                                               resolve, tile_efficiency)
from hidet_plugin_matmul.cuda_ir_builders import both, guarded_copy, seq_of, store
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, static_tasks, target_int, task_dtype, worker_origin
from hidet_plugin_matmul.cuda_simt_vec import F32X4, VecStage
from hidet_plugin_matmul.operators import MatmulOperands

A_PAD = 4  # floats of padding per transposed A row: conflict-free stores, 16-byte aligned rows


def simt_config(params: Mapping[str, Any]) -> dict:
    """Derived sizes of a parameter set."""
    tm, tn = params["thread_m"], params["thread_n"]
    wm, wn = params["warps_m"], params["warps_n"]
    lm, ln = params["lanes_m"], params["lanes_n"]
    bk = params["block_k"]
    threads = wm * wn * lm * ln
    bm, bn = tm * wm * lm, tn * wn * ln
    smem = 2 * bk * (bm + A_PAD) * 4 + 2 * bk * bn * 4
    return {"threads": threads, "bm": bm, "bn": bn, "bk": bk, "smem": smem,
            "a_loads": bm * bk // threads, "b_loads": bn * bk // threads,
            # the vector form (`vec`): 16-byte chunks of A rows and B rows per thread
            "a_chunks": bm * bk // 4 // threads, "b_chunks": bn * bk // 4 // threads}


def _legal(params: dict, target: Any) -> bool:
    cfg = simt_config(params)
    if cfg["threads"] not in (64, 128, 256) or cfg["smem"] > target_int(target, "smem_per_block", 48 * 1024):
        return False
    if (cfg["bm"] * cfg["bk"]) % cfg["threads"] or (cfg["bn"] * cfg["bk"]) % cfg["threads"]:
        return False
    if params.get("vec") and ((cfg["bm"] * cfg["bk"] // 4) % cfg["threads"] or cfg["a_chunks"] == 0
                              or (cfg["bn"] * cfg["bk"] // 4) % cfg["threads"] or cfg["b_chunks"] == 0):
        return False
    # registers per thread: accumulators, two fragment buffers, staged global loads,
    # plus ~40 for addresses; the compiler must not spill under 255.
    return simt_registers(params) <= min(255, target_int(target, "regs_per_block", 65536) // cfg["threads"])


def simt_registers(params: Mapping[str, Any]) -> int:
    cfg = simt_config(params)
    staged = cfg["a_loads"] if params.get("vec") else cfg["a_loads"] + cfg["b_loads"]  # vec: B by cp.async
    return params["thread_m"] * params["thread_n"] + 2 * (params["thread_m"] + params["thread_n"]) + staged + 40


def simt_kernel(params: Mapping[str, Any], split: int = 1) -> Kernel:
    """A candidate as the cost model sees it: FFMA, element loads staged in registers
    (double-buffered), efficiency from the thread tile's reuse."""
    cfg = simt_config(params)
    return Kernel(cfg["bm"], cfg["bn"], cfg["bk"], cfg["threads"], cfg["smem"], simt_registers(params), 2, split,
                  rate=tile_efficiency(params["thread_m"], params["thread_n"], 2), fma=True, register_staged=True)


def simt_auto(ops: MatmulOperands, target: Any) -> tuple[dict, float]:
    """The default's parameters for this shape and their modelled seconds."""
    return choose(simt_space(target, 2), lambda p: None if is_auto(p) else simt_kernel(p),
                  Gemm(ops.m, ops.n, ops.k, ops.batch, 4), target)


def simt_space(target: Any, level: int) -> list[dict]:
    default = {"thread_m": 8, "thread_n": 8, "warps_m": 2, "warps_n": 4, "lanes_m": 8, "lanes_n": 4,
               "block_k": 8}
    if level == 0:
        return [dict(AUTO)]
    out = [dict(AUTO), default]
    for tm, tn in ((8, 8), (8, 4), (4, 8), (4, 4)):
        for wm, wn in ((2, 4), (4, 2), (2, 2), (1, 4), (4, 1), (1, 2), (2, 1)):
            for lm, ln in ((8, 4), (4, 8)):
                for bk in (8, 16):
                    p = {"thread_m": tm, "thread_n": tn, "warps_m": wm, "warps_n": wn, "lanes_m": lm,
                         "lanes_n": ln, "block_k": bk}
                    if p != default and _legal(p, target):
                        out.append(p)
    if level == 1:
        # the most work per thread first: 8x8 tiles with BK 8 and 16 (v2's best on the
        # H200 is BK 16), then 8x4 tiles with BK 8
        rest = [p for p in out[2:] if p["thread_m"] * p["thread_n"] == 64
                or (p["thread_m"] * p["thread_n"] >= 32 and p["block_k"] == 8)]
        rest.sort(key=lambda p: (-p["thread_m"] * p["thread_n"], -simt_config(p)["threads"]))
        out = (out[:2] + rest)[:30]
    return out


def simt_split_plan(k: int, bk: int, split: int) -> tuple[int, int]:
    """(k-tiles per slice, slices actually used) when K is cut into `split` slices."""
    k_tiles = max(1, ceil_div(k, bk))
    tiles = ceil_div(k_tiles, split)
    return tiles, ceil_div(k_tiles, tiles)


def build_simt_module(ops: MatmulOperands, params: Mapping[str, Any], name: str, split: int = 1, extra: tuple = (),
                      vec: bool = False, cluster: bool = False):
    """The kernel; with `split` > 1 (cuda_splitk) block z = batch * slices + slice sums
    its slice of K into an fp32 workspace [slices, batch, M, N] (same code otherwise);
    `extra`: more script functions for the module (the split-K reduce); `vec`: the
    vector form (`cuda_simt_vec`; the caller checks `vec_applies`); `cluster` (with
    `vec`): the slices of a tile are one thread-block cluster along x that sums its
    partials through distributed shared memory and writes C itself (no workspace)."""
    from hidet_plugin_cuda.hopper import cluster_sync
    from hidet_plugin_cuda.lang import blockIdx, cp_async_wait_group, dynamic_shared_tensor, syncthreads, threadIdx

    cfg = simt_config(params)
    threads, bm, bn, bk = cfg["threads"], cfg["bm"], cfg["bn"], cfg["bk"]
    tm, tn = params["thread_m"], params["thread_n"]
    c_map = (repeat(tm // 4, tn // 4) * spatial(params["warps_m"], params["warps_n"])
             * spatial(params["lanes_m"], params["lanes_n"]) * repeat(4, 4))
    a_map = auto_map(bm, bk, workers=threads)  # k fastest: coalesced reads of A rows
    b_map = auto_map(bk, bn, workers=threads)  # n fastest: coalesced reads of B rows
    c_tasks, a_tasks, b_tasks = static_tasks(c_map), static_tasks(a_map), static_tasks(b_map)
    # fragment positions: the distinct rows / columns of this thread's C tasks
    rows = sorted({i for i, _ in c_tasks})
    cols = sorted({j for _, j in c_tasks})
    m, n, k = ops.m, ops.n, ops.k
    k_tiles = max(1, ceil_div(k, bk))
    splits = 1
    if split > 1:  # k_tiles becomes the tiles of one slice
        k_tiles, splits = simt_split_plan(k, bk, split)
    cluster = cluster and vec and splits > 1
    a_shape, b_shape = ops.a_shape, ops.b_shape
    c_shape = ops.c_shape if splits == 1 or cluster else (splits, ops.batch, m, n)
    grid = (ceil_div(n, bn), ceil_div(m, bm), ops.batch * splits)
    if cluster:  # block x = N tile * slices + slice: a cluster holds the slices of one tile
        grid = (ceil_div(n, bn) * splits, ceil_div(m, bm), ops.batch)
    sa_bytes = 2 * bk * (bm + A_PAD) * 4
    acc_layout = mapping_register_layout(c_map)
    # v2: guards that the shape makes always true are not emitted (M % BM, N % BN, K % BK
    # == 0: e.g. 4096^3 has no guarded load at all); the rest stay tensor-element reads
    guard_m, guard_n, guard_k = m % bm != 0, n % bn != 0, k % bk != 0 or k_tiles * splits * bk > k

    def kofs(e):  # k offset of this block's slice (split-K)
        if cluster:
            return e + blockIdx.x % splits * (k_tiles * bk)
        return e if splits == 1 else e + blockIdx.z % splits * (k_tiles * bk)

    def c_at(bz, row, col):
        return ops.c_index(bz, row, col) if splits == 1 else (blockIdx.z % splits, bz, row, col)

    def load(dst, src, in_mn, in_k, g_mn, g_k):
        conds = ([in_mn] if g_mn else []) + ([in_k] if g_k else [])
        if not conds:
            return store(dst, src)
        cond = conds[0] if len(conds) == 1 else both(conds[0], conds[1])
        return guarded_copy(dst, src, cond)

    vs_dtype = F32X4
    vs = VecStage(ops, bm, bn, bk, threads, kofs, (guard_m, guard_n, guard_k)) if vec else None

    def prefetch(a, b, ra, rb, bz, m0, n0, k1, ai, ak, bk0, bj, sb, buf):
        if vec:  # ra: the float4 registers, rb: their float view; B goes straight to sb[buf]
            return seq_of([vs.load_a(ra, rb, a, bz, m0, k1, ai, ak), vs.copy_b(sb, buf, b, bz, n0, k1, bk0, bj)])
        out = []
        for t, (i, q) in enumerate(a_tasks):
            out.append(load(ra[t], a[ops.a_index(bz, m0 + ai + i, kofs(k1 + ak + q))], m0 + ai + i < m,
                            kofs(k1 + ak + q) < k, guard_m, guard_k))
        for t, (q, j) in enumerate(b_tasks):
            out.append(load(rb[t], b[ops.b_index(bz, kofs(k1 + bk0 + q), n0 + bj + j)], n0 + bj + j < n,
                            kofs(k1 + bk0 + q) < k, guard_n, guard_k))
        return seq_of(out)

    @script
    def matmul_simt(a: f32[a_shape], b: f32[b_shape], c: f32[c_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = grid
        attrs.cuda.block_dim = threads
        if cluster:  # dynamic: the tiles, then (aliased) the block's partial tile for its peers
            attrs.cuda.cluster_size = splits
            attrs.cuda.dynamic_smem_bytes = max(sa_bytes + 2 * bk * bn * 4, bm * bn * 4)
            sa = dynamic_shared_tensor(f32, [2, bk, bm + A_PAD], 0)
            sb = dynamic_shared_tensor(f32, [2, bk, bn], sa_bytes)
        else:
            sa = shared_tensor(f32, [2, bk, bm + A_PAD])
            sb = shared_tensor(f32, [2, bk, bn])
        acc = register_tensor(f32, [bm, bn], acc_layout)
        af = register_tensor(f32, [2, len(rows)])
        bf = register_tensor(f32, [2, len(cols)])
        if vec:
            ra = register_tensor(vs_dtype, [len(vs.a_tasks)])
            rb = tensor_pointer(f32, [len(vs.a_tasks), 4], init=vs.lanes(ra))
        else:
            ra = register_tensor(f32, [len(a_tasks)])
            rb = register_tensor(f32, [len(b_tasks)])
        tid = threadIdx.x
        bz = blockIdx.z if splits == 1 or cluster else blockIdx.z // splits
        m0 = blockIdx.y * bm
        n0 = blockIdx.x // splits * bn if cluster else blockIdx.x * bn
        ci, cj = worker_origin(c_map, tid)
        if vec:  # (row, k chunk) of A, (k row, n chunk) of B
            ai, ak, bk0, bj = vs.origins(tid)
        else:
            ai, ak = worker_origin(a_map, tid)
            bk0, bj = worker_origin(b_map, tid)
        for i, j in c_tasks:
            acc[i, j] = 0.0
        # tile 0: global -> registers -> buffer 0
        if vec:
            prefetch(a, b, ra, rb, bz, m0, n0, 0, ai, ak, bk0, bj, sb, 0)
            vs.store_a(sa, 0, rb, ai, ak)
            cp_async_wait_group(0)
        for t, (i, kk) in enumerate(a_tasks if not vec else ()):
            load(ra[t], a[ops.a_index(bz, m0 + ai + i, kofs(ak + kk))], m0 + ai + i < m, kofs(ak + kk) < k, guard_m,
                 guard_k)
        for t, (kk, j) in enumerate(b_tasks if not vec else ()):
            load(rb[t], b[ops.b_index(bz, kofs(bk0 + kk), n0 + bj + j)], n0 + bj + j < n, kofs(bk0 + kk) < k, guard_n,
                 guard_k)
        for t, (i, kk) in enumerate(a_tasks if not vec else ()):
            sa[0, ak + kk, ai + i] = ra[t]
        for t, (kk, j) in enumerate(b_tasks if not vec else ()):
            sb[0, bk0 + kk, bj + j] = rb[t]
        syncthreads()
        for x, i in enumerate(rows):
            af[0, x] = sa[0, 0, ci + i]
        for y, j in enumerate(cols):
            bf[0, y] = sb[0, 0, cj + j]
        for kt in range(k_tiles):
            cur = kt % 2
            k1 = (kt + 1) * bk  # first k of the next tile
            for kk in static_range(bk):
                if kk == 0:
                    # next tile's global loads, in flight during this tile's FMAs; without a
                    # K guard (K % BK == 0) the tile past the last is skipped instead
                    if guard_k:
                        prefetch(a, b, ra, rb, bz, m0, n0, k1, ai, ak, bk0, bj, sb, 1 - cur)
                    else:
                        if kt + 1 < k_tiles:
                            prefetch(a, b, ra, rb, bz, m0, n0, k1, ai, ak, bk0, bj, sb, 1 - cur)
                if kk == bk - 1:
                    if vec:
                        vs.store_a(sa, 1 - cur, rb, ai, ak)
                        cp_async_wait_group(0)
                    for t, (i, q) in enumerate(a_tasks if not vec else ()):
                        sa[1 - cur, ak + q, ai + i] = ra[t]
                    for t, (q, j) in enumerate(b_tasks if not vec else ()):
                        sb[1 - cur, bk0 + q, bj + j] = rb[t]
                    syncthreads()
                    for x, i in enumerate(rows):
                        af[(kk + 1) % 2, x] = sa[1 - cur, 0, ci + i]
                    for y, j in enumerate(cols):
                        bf[(kk + 1) % 2, y] = sb[1 - cur, 0, cj + j]
                else:
                    for x, i in enumerate(rows):
                        af[(kk + 1) % 2, x] = sa[cur, kk + 1, ci + i]
                    for y, j in enumerate(cols):
                        bf[(kk + 1) % 2, y] = sb[cur, kk + 1, cj + j]
                for x, i in enumerate(rows):
                    for y, j in enumerate(cols):
                        acc[i, j] += af[kk % 2, x] * bf[kk % 2, y]
        if cluster:  # partial tile -> own shared memory; each block sums its share over the cluster
            syncthreads()
            red = dynamic_shared_tensor(f32, [bm, bn], 0)
            for i, j in c_tasks:
                red[ci + i, cj + j] = acc[i, j]
            cluster_sync()
            cs = register_tensor(f32, [splits, 4])
            vs.cluster_reduce(red, cs, c, splits, blockIdx.x % splits, tid, bz, m0, n0)
            cluster_sync()  # peers read this block's shared memory until here
        if vec and splits > 1 and not cluster:  # the fp32 partials (no epilogue grafts here): 16-byte stores
            cv = register_tensor(vs_dtype, [1])
            cvf = tensor_pointer(f32, [4], init=vs.lanes(cv))
            c4 = tensor_pointer(vs_dtype, [splits, ops.batch, m, n // 4], init=vs.as_vectors(c))
            vs.store_partials(c4, cv, cvf, acc, c_tasks, blockIdx.z % splits, bz, m0 + ci, n0 + cj)
        for i, j in (c_tasks if not (vec and splits > 1) else ()):  # (cluster: stored by cluster_reduce)
            if m0 + ci + i < m and n0 + cj + j < n:
                c[c_at(bz, m0 + ci + i, n0 + cj + j)] = acc[i, j]

    return script_module(matmul_simt, *extra, name=name)


class CudaSimtMatmul(Template):
    """fp32 matmul on CUDA cores; see the module docstring."""

    name = "matmul.cuda_simt"
    operator = "matmul"
    target = "cuda"
    version = "2"
    priority = 1

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return task_dtype(task) == "float32"

    def space(self, target: Any, level: int) -> list[dict]:
        return simt_space(target, level)

    def estimate(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> float:
        """Modelled seconds of `params` (the default: of the candidate it resolves to)."""
        ops = MatmulOperands(attributes)
        if params == AUTO:
            return simt_auto(ops, target)[1]
        params = resolve(params, lambda: simt_auto(ops, target)[0])
        return modelled_seconds(Gemm(ops.m, ops.n, ops.k, ops.batch, 4), simt_kernel(params), Gpu.from_target(target))

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        ops = MatmulOperands(attributes)
        p = params = resolve(params, lambda: simt_auto(ops, target)[0])
        name = (f"matmul_simt_{ops.key()}_t{p['thread_m']}x{p['thread_n']}_w{p['warps_m']}x{p['warps_n']}"
                f"_l{p['lanes_m']}x{p['lanes_n']}_k{p['block_k']}")
        module = build_simt_module(ops, params, name)
        launch = Launch(name, (BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)))
        return ScheduledTask(module, (launch,), (), source=self.name, params=dict(params))
