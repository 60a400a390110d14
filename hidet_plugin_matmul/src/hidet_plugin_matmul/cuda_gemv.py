"""CUDA matmul for short M (decode, small batches): a GEMV-shaped kernel on the FMA
units, fp32 accumulation, for fp32 (M <= 32), fp16 and bf16 (M <= 8), in the script DSL.

With M of 1 to a few tens, C = A @ B is bound by reading B ([K, N], N contiguous) once:
there is no reuse of B to stage, so B goes straight from global memory to registers in
16-byte vectors, and every thread keeps all M rows of its columns in fp32 registers.

Block (one M tile of ``min(M, rows)`` rows, BN columns, one slice of K):

- threads form the task mapping ``spatial(warps * lanes_k, 32 / lanes_k)`` over
  (k row, column vector): a warp covers ``lanes_k`` rows of ``32 / lanes_k`` vectors,
  i.e. one or more whole 128-byte lines of B per row (coalesced), BN = (32 / lanes_k)
  * vec columns (vec = 16 bytes of elements when N allows, else 1);
- each thread walks its k rows ``warps * lanes_k`` apart, `unroll` rows loaded before
  their FMAs (that many 16-byte loads in flight per thread); A's elements are read
  as tensor elements (a warp's lanes on one k row read one address: a broadcast);
- the partial sums of a column combine by warp shuffles (``shfl_xor`` over the
  lanes_k lanes of a warp) and then through shared memory over the warps;
- `split` blocks along K: with more than one slice, each block writes its fp32 partial
  sums to a workspace [split, batch, M, N] and a second launch adds them (split-K);
  that is how a 4096-column product fills 132 SMs. The other way, in one launch:
  one-row blocks (``rows`` 1, for M = 1) of up to 32 warps along K. Measured on the
  H200 (docs/perf_notes.md, session 4): 1x4096x11008 fp16 24.9 us with split 16,
  28.2 us in one launch of 32-warp blocks (cuBLAS 27.5 us), by kernel time.

Grid: (M tiles, column blocks, batch * splits), M tiles fastest, so the blocks that
read the same columns of B run together and share them through L2.

Stores of C are guarded tensor-element stores (graftable epilogue). As the anchor of a
fusion group (the driver marks it) B is read by element, so a prologue can be grafted.
The space comes from the target (warp size, threads and shared memory per block):
lanes along K, warps, split, unroll depth, rows per block.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.expr import cast
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, deref, f32, register_tensor, script, script_module, shared_tensor, static_range,
    tensor_pointer,
)
from hidet_framework.lang.annotations import DTypeAnnotation
from hidet_framework.mapping.task_mapping import spatial
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

from hidet_plugin_matmul.cuda_ir_builders import guard, select, seq_of, store
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, target_int, task_dtype, worker_origin
from hidet_plugin_matmul.operators import MatmulOperands

# rows up to which the template applies (tiles of `rows` rows each): beyond 8 rows of
# 16-bit types the tensor cores win (H200, 16x4096x4096 fp16: cuda_hopper_skinny 7.3 us,
# this template 21.1 us); fp32 has no tensor-core path here (TF32 stays off)
MAX_M = {"float32": 32, "float16": 8, "bfloat16": 8}
SPLITS = (1, 2, 4, 8, 16, 32)  # blocks along K
DEFAULT = {"lanes_k": 4, "warps": 8, "split": 8, "unroll": 4, "rows": 8}
RAW16 = PointerType(dtypes.vector_type(dtypes.uint32, 4))


def gemv_config(params: Mapping[str, Any], ops: MatmulOperands | None = None, elem_bytes: int = 2,
                vector: bool = True) -> dict:
    """Derived sizes. Without `ops` the worst case over shapes (rows = params["rows"],
    2-byte elements: the widest column block) for the legality checks."""
    lk, warps, unroll = params["lanes_k"], params["warps"], params["unroll"]
    lanes_n = 32 // lk
    vec = 16 // elem_bytes if vector else 1
    if ops is not None and (ops.n % vec):
        vec = 1
    rows = params["rows"] if ops is None else min(ops.m, params["rows"])
    kt = warps * lk
    out = {"threads": 32 * warps, "lanes_n": lanes_n, "vec": vec, "bn": lanes_n * vec, "kt": kt,
           "step": kt * unroll, "rows": rows}
    out["smem"] = warps * rows * out["bn"] * 4
    if ops is not None:
        per = ceil_div(ceil_div(ops.k, params["split"]), out["step"]) * out["step"]  # K rows per slice
        out.update(chunk=per, splits=ceil_div(ops.k, per), m_tiles=ceil_div(ops.m, rows),
                   n_blocks=ceil_div(ops.n, out["bn"]))
    return out


def gemv_legal(params: Mapping[str, Any], target: Any) -> bool:
    cfg = gemv_config(params)
    if cfg["threads"] > target_int(target, "max_threads_per_block", 1024):
        return False
    if cfg["smem"] > target_int(target, "smem_per_block", 48 * 1024):
        return False
    # fp32 accumulators (rows x 8 for 16-bit types), the loaded vectors, ~24 for the rest
    regs = cfg["rows"] * 9 + params["unroll"] * 4 + 24
    return regs <= min(255, target_int(target, "regs_per_block", 65536) // cfg["threads"])


def gemv_space(target: Any, level: int) -> list[dict]:
    if level == 0:
        return [DEFAULT]
    out = [DEFAULT]

    def add(p: dict) -> None:
        if p not in out and gemv_legal(p, target):
            out.append(p)

    warp = target_int(target, "warp_size", 32)
    lanes = [x for x in (1, 2, 4, 8) if warp % x == 0]
    if level == 1:  # 8 rows a block with 4 or 8 rows of B in flight a thread; 16 rows a block
        for split in SPLITS:
            for lk, warps, unroll in ((4, 8, 4), (4, 8, 8), (2, 4, 8)):
                add({"lanes_k": lk, "warps": warps, "split": split, "unroll": unroll, "rows": 8})
        for split in (2, 4, 8, 16):
            add({"lanes_k": 4, "warps": 4, "split": split, "unroll": 4, "rows": 16})
        # one row (M = 1): up to 32 warps along K in one block, one launch (no split-K reduce)
        for lk, warps, unroll in ((8, 16, 8), (4, 16, 8), (8, 32, 4), (4, 32, 4)):
            for split in (1, 2):
                add({"lanes_k": lk, "warps": warps, "split": split, "unroll": unroll, "rows": 1})
        return out[:30]
    for lk in lanes:  # 8 rows a block: every shape of the other axes
        for warps in (4, 8):
            for split in SPLITS:
                for unroll in (4, 8):
                    add({"lanes_k": lk, "warps": warps, "split": split, "unroll": unroll, "rows": 8})
    for lk in lanes[1:3]:  # 16 rows a block (M of 9 to 32)
        for warps in (4, 8):
            for split in SPLITS:
                add({"lanes_k": lk, "warps": warps, "split": split, "unroll": 4, "rows": 16})
    for lk in lanes[2:]:  # 1 row a block, many warps
        for warps in (16, 32):
            for split in (1, 2, 4):
                for unroll in (4, 8):
                    add({"lanes_k": lk, "warps": warps, "split": split, "unroll": unroll, "rows": 1})
    return out


def build_gemv_module(ops: MatmulOperands, dtype: str, params: Mapping[str, Any], name: str, vector: bool):
    from hidet_plugin_cuda.lang import FULL_MASK, blockIdx, shfl_xor_sync, syncthreads, threadIdx

    dt = DTypeAnnotation(data_type(dtype))
    eb = data_type(dtype).nbytes
    cfg = gemv_config(params, ops, eb, vector)
    threads, lanes_n, vec, bn, kt = cfg["threads"], cfg["lanes_n"], cfg["vec"], cfg["bn"], cfg["kt"]
    rows, step, chunk, splits = cfg["rows"], cfg["step"], cfg["chunk"], cfg["splits"]
    unroll, warps, lanes_k = params["unroll"], params["warps"], params["lanes_k"]
    m, n, k, batch = ops.m, ops.n, ops.k, ops.batch
    grid = (cfg["m_tiles"], cfg["n_blocks"], batch * splits)
    thread_map = spatial(kt, lanes_n)  # (k row, column vector) of each thread
    out_dt = f32 if splits > 1 else dt
    out_shape = (splits, batch, m, n) if splits > 1 else ops.c_shape
    m_whole, n_whole = m % rows == 0, n % bn == 0
    slices_whole = k % chunk == 0  # every slice holds `chunk` rows: no K tail anywhere
    raw_lanes = vec * eb // 4  # u32 words of one vector (vector path)
    per_thread_out = ceil_div(rows * bn, threads)
    other_warps = list(range(1, warps))

    def out_index(s, bz, row, col):
        return (s, bz, row, col) if splits > 1 else ops.c_index(bz, row, col)

    def fma_rows(acc, a, bsrc, u, bz, m0, krow):
        """acc[r, j] += A[m0 + r, krow] * B value j of loaded row u, every row r and lane j
        (rows past M in a partial last tile read row M - 1: in bounds, never stored)."""
        out = []
        for r in range(rows):
            row = m0 + r if m_whole else select(m0 + r < m, m0 + r, m - 1)
            av = cast(a[ops.a_index(bz, row, krow)], dtypes.float32)
            for j in range(vec):
                bval = cast(bsrc[u, j], dtypes.float32) if vec > 1 else bsrc[u]
                out.append(store(acc[r, j], acc[r, j] + av * bval))
        return seq_of(out)

    @script
    def matmul_gemv(a: dt[ops.a_shape], b: dt[ops.b_shape], out: out_dt[out_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = grid
        attrs.cuda.block_dim = threads
        red = shared_tensor(f32, [warps, rows, bn])
        acc = register_tensor(f32, [rows, vec])
        if vec > 1:
            raw = register_tensor(dtypes.vector_type(dtypes.uint32, 4), [unroll * raw_lanes // 4])
            bsrc = tensor_pointer(data_type(dtype), [unroll, vec],
                                  init=cast(address_of(raw[0]), PointerType(data_type(dtype))))
        else:
            rb = register_tensor(f32, [unroll])
            bsrc = rb
        tid = threadIdx.x
        kl, nl = worker_origin(thread_map, tid)
        m0 = blockIdx.x * rows
        col = blockIdx.y * bn + nl * vec
        bz = blockIdx.z // splits
        s = blockIdx.z % splits
        k0 = s * chunk
        for r in static_range(rows):
            for j in static_range(vec):
                acc[r, j] = 0.0
        # full steps of `step` rows need no K guard; the rest of the slice (at most one
        # step, only where K leaves a partial slice) loads under a guard
        if slices_whole:
            full = chunk // step
        else:
            full = (min(k, k0 + chunk) - k0) // step
        for it in range(full):
            kb = k0 + it * step + kl
            if n_whole or col < n:
                for u in static_range(unroll):
                    if vec > 1:
                        raw[u] = deref(cast(address_of(b[ops.b_index(bz, kb + u * kt, col)]), RAW16))
                    else:
                        rb[u] = cast(b[ops.b_index(bz, kb + u * kt, col)], dtypes.float32)
                for u in static_range(unroll):
                    fma_rows(acc, a, bsrc, u, bz, m0, kb + u * kt)
        if not slices_whole:
            kt0 = k0 + full * step + kl
            kend = min(k, k0 + chunk)
            if n_whole or col < n:
                for u in static_range(unroll):
                    if kt0 + u * kt < kend:
                        if vec > 1:
                            raw[u] = deref(cast(address_of(b[ops.b_index(bz, kt0 + u * kt, col)]), RAW16))
                        else:
                            rb[u] = cast(b[ops.b_index(bz, kt0 + u * kt, col)], dtypes.float32)
                        fma_rows(acc, a, bsrc, u, bz, m0, kt0 + u * kt)
        # lanes of one warp on the same columns: shuffles; then the warps, in shared memory
        for x in static_range(lanes_k.bit_length() - 1):
            for r in static_range(rows):
                for j in static_range(vec):
                    acc[r, j] = acc[r, j] + shfl_xor_sync(FULL_MASK, acc[r, j], lanes_n << x)
        if kl % lanes_k == 0:
            for r in static_range(rows):
                for j in static_range(vec):
                    red[kl // lanes_k, r, nl * vec + j] = acc[r, j]
        syncthreads()
        for e in static_range(per_thread_out):
            idx = tid + e * threads
            if (rows * bn) % threads == 0 or idx < rows * bn:
                orow = idx // bn
                ocol = idx % bn
                total = red[0, orow, ocol]
                for w in other_warps:
                    total = total + red[w, orow, ocol]
                if guard([(m_whole, m0 + orow < m), (n_whole, blockIdx.y * bn + ocol < n)]):
                    out[out_index(s, bz, m0 + orow, blockIdx.y * bn + ocol)] = total

    kernels = [matmul_gemv]
    if splits > 1:
        from hidet_plugin_matmul.cuda_tensor_core_kernel import build_split_reduce

        kernels.append(build_split_reduce(ops, dt, splits, name + "_reduce"))
    return script_module(*kernels, name=name)


def _anchor(attributes: Mapping[str, Any]) -> bool:
    try:
        from hidet_framework.fusion.plan import ANCHOR_ATTRIBUTE
    except ImportError:  # pragma: no cover
        return False
    return bool(attributes.get(ANCHOR_ATTRIBUTE, False))


class CudaGemvMatmul(Template):
    """Short-M matmul (fp32 M <= 32, fp16/bf16 M <= 8) on the FMA units; see the module docstring."""

    name = "matmul.cuda_gemv"
    operator = "matmul"
    target = "cuda"
    version = "1"
    priority = 4  # the level-0 default where it applies

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return int(attributes["m"]) <= MAX_M.get(task_dtype(task), 0)

    def space(self, target: Any, level: int) -> list[dict]:
        return gemv_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        ops = MatmulOperands(attributes)
        dtype = task_dtype(task)
        p = dict(DEFAULT, **params)
        vector = not _anchor(attributes)
        cfg = gemv_config(p, ops, data_type(dtype).nbytes, vector)
        name = (f"matmul_gemv_{dtype}_{ops.key()}_k{p['lanes_k']}w{p['warps']}u{p['unroll']}r{cfg['rows']}"
                f"_v{cfg['vec']}_s{cfg['splits']}")
        module = build_gemv_module(ops, dtype, p, name, vector)
        a, b, c = BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)
        if cfg["splits"] == 1:
            return ScheduledTask(module, (Launch(name, (a, b, c)),), (), source=self.name, params=p)
        ws = BufferRef("workspace", 0)
        workspace = (WorkspaceSpec("matmul_gemv_partials", "float32", (cfg["splits"], ops.batch, ops.m, ops.n)),)
        launches = (Launch(name, (a, b, ws)), Launch(name + "_reduce", (ws, c)))
        return ScheduledTask(module, launches, workspace, source=self.name, params=p)
