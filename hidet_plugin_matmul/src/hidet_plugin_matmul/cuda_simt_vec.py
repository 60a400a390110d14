"""The vector form of the SIMT kernel (`cuda_simt`), asked for by ``"vec": 1``.

What changes against the element form (fragments, FMAs and the C stores stay the same):

- A: each thread reads 16-byte chunks of A rows (4 consecutive k) into a float4
  register and writes its 4 lanes to the transposed tile ``sa[buf, k, i]``
  (``auto_map(BM, BK/4)`` over (row, chunk): one LDG.128 and 4 STS instead of 4 LDG and
  4 STS per 4 elements);
- B: each 16-byte chunk of a B row goes global -> shared by ``cp.async.cg`` (no register
  staging, no STS: ``auto_map(BK, BN/4)`` over (k row, chunk)); the copies of tile kt+1
  are issued at the start of tile kt into the other buffer and waited for just before
  the tile's barrier (the same point where the A registers are stored);
- guards at chunk granularity: K and N are multiples of 4 (the form applies only then),
  so a chunk is wholly inside or wholly outside the operand; an outside A chunk is zero,
  an outside B chunk is zero-filled by the copy (source size 0, source clamped to the
  tile's first element, nothing read);
- split-K partials (the fp32 workspace, where no epilogue is grafted) are written 4
  columns a store (float4): a warp's store fills whole 32-byte sectors, where the
  element stores touched 4x as many sectors a quarter full;
- ``"cluster": 1`` (sm_90, 2 to 8 slices): the slices of one C tile are one
  thread-block cluster along x (block x = N tile * slices + slice). After the K loop
  each block puts its partial tile in its own shared memory (aliasing the operand
  tiles), the cluster syncs, each block sums its share of the tile's 16-byte chunks
  over the cluster's blocks (``ld.shared::cluster``) and stores them to C by guarded
  element stores (graftable), and the cluster syncs again before exiting. One launch,
  no workspace: no 16 MB partial round trip at 128x4096x4096 and no reduce launch.

It applies where rows are 16-byte aligned (K % 4 == 0 and N % 4 == 0; buffers are
256-byte aligned) and the kernel is not the anchor of a fusion group: prologues graft
onto element reads only, so an anchor (and any unaligned shape) builds the element form.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import address_of, deref
from hidet_framework.mapping.task_mapping import auto_map

from hidet_plugin_matmul.cuda_ir_builders import guard, select, seq_of, store
from hidet_plugin_matmul.cuda_matmul_common import static_tasks, worker_origin

F32X4 = dtypes.vector_type(dtypes.float32, 4)
F32X4_PTR = PointerType(F32X4)
F32_PTR = PointerType(dtypes.float32)


def is_anchor(attributes: Mapping[str, Any]) -> bool:
    try:
        from hidet_framework.fusion.plan import ANCHOR_ATTRIBUTE
    except ImportError:  # pragma: no cover - a core without the fusion stage
        return False
    return bool(attributes.get(ANCHOR_ATTRIBUTE, False))


def vec_applies(ops: Any, params: Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    """Whether `params` ask for the vector form and the task allows it."""
    return bool(params.get("vec")) and ops.k % 4 == 0 and ops.n % 4 == 0 and not is_anchor(attributes)


def cluster_share(bm: int, bn: int, threads: int, splits: int) -> tuple[int, int, int]:
    """(16-byte chunks of the tile, chunks per cluster rank, steps per thread): rank r
    sums chunks ``r * per_rank + t * threads + tid`` for t < steps, those below
    ``(r + 1) * per_rank`` and the tile's chunk count."""
    chunks = bm * bn // 4
    per_rank = -(-chunks // splits)
    return chunks, per_rank, -(-per_rank // threads)


class VecStage:
    """The loads of one k-tile in the vector form, as IR built while the kernel traces.

    `kofs(e)`: the global k of tile-relative k `e` (adds the split-K slice offset);
    `guards` (m, n, k): which bounds the static shape leaves in doubt."""

    def __init__(self, ops: Any, bm: int, bn: int, bk: int, threads: int, kofs: Callable, guards: tuple) -> None:
        self.ops, self.kofs = ops, kofs
        self.bm, self.bn, self.threads = bm, bn, threads
        self.guard_m, self.guard_n, self.guard_k = guards
        self.a_map = auto_map(bm, bk // 4, workers=threads)  # (row, k chunk): chunks of a row fastest
        self.b_map = auto_map(bk, bn // 4, workers=threads)  # (k row, n chunk): coalesced rows of B
        self.a_tasks = static_tasks(self.a_map)
        self.b_tasks = static_tasks(self.b_map)

    def origins(self, tid: Any) -> tuple:
        return worker_origin(self.a_map, tid) + worker_origin(self.b_map, tid)

    def lanes(self, ra4: Any) -> Any:
        """The float view `[chunks, 4]` of the float4 staging registers (declare it
        with ``tensor_pointer``)."""
        return cast(address_of(ra4[0]), F32_PTR)

    def as_vectors(self, c: Any) -> Any:
        """The fp32 workspace as float4 elements (N % 4 == 0: rows stay aligned)."""
        return cast(c, F32X4_PTR)

    def store_partials(self, c4: Any, cv: Any, cvf: Any, acc: Any, c_tasks: list, s: Any, bz: Any, row0: Any,
                       col0: Any) -> Any:
        """The accumulators of tasks (i, j) -> the workspace, 4 columns a store (`col0`
        and the tasks' chunk starts are multiples of 4, so a chunk is wholly inside or
        outside N)."""
        from hidet_framework.ir.stmt import IfStmt

        out = []
        for i, j in c_tasks:
            if j % 4:
                continue
            row, col = row0 + i, col0 + j
            body = seq_of([store(cvf[e], acc[i, j + e]) for e in range(4)]
                          + [store(c4[s, bz, row, col // 4], cv[0])])
            cond = guard([(not self.guard_m, row < self.ops.m), (not self.guard_n, col < self.ops.n)])
            out.append(body if cond is True else IfStmt(cond, body))
        return seq_of(out)

    def cluster_reduce(self, red: Any, cs: Any, c: Any, splits: int, rank: Any, tid: Any, bz: Any, m0: Any,
                       n0: Any) -> Any:
        """Cluster form: the block of rank `rank` sums its share of the tile's 16-byte
        chunks over the `splits` blocks' partial tiles `red` (distributed shared memory)
        and writes them to C by guarded element stores (a graftable epilogue). `cs`:
        [splits, 4] f32 registers (one chunk of each peer; the sum lands in row 0)."""
        from hidet_framework.ir.stmt import IfStmt
        from hidet_plugin_cuda.hopper import ld_shared_cluster_v4_f32

        chunks, per_rank, steps = cluster_share(self.bm, self.bn, self.threads, splits)
        row_chunks = self.bn // 4
        out = []
        for t in range(steps):
            local = t * self.threads + tid
            idx = rank * per_rank + local
            row, col = idx // row_chunks, idx % row_chunks * 4
            body = [ld_shared_cluster_v4_f32([cs[q, e] for e in range(4)], address_of(red[row, col]), q)
                    for q in range(splits)]  # all loads in flight, then the sums
            for q in range(1, splits):
                body += [store(cs[0, e], cs[0, e] + cs[q, e]) for e in range(4)]
            for e in range(4):
                ok = guard([(not self.guard_m, m0 + row < self.ops.m), (not self.guard_n, n0 + col + e < self.ops.n)])
                st = store(c[self.ops.c_index(bz, m0 + row, n0 + col + e)], cs[0, e])
                body.append(st if ok is True else IfStmt(ok, st))
            cond = guard([((t + 1) * self.threads <= per_rank, local < per_rank),
                          (per_rank * splits == chunks, idx < chunks)])
            out.append(seq_of(body) if cond is True else IfStmt(cond, seq_of(body)))
        return seq_of(out)

    def load_a(self, ra4: Any, raf: Any, a: Any, bz: Any, m0: Any, k1: Any, ai: Any, akc: Any) -> Any:
        """A chunks of the tile at k1 -> float4 registers (zero outside A)."""
        out = []
        for t, (i, q) in enumerate(self.a_tasks):
            row, col = m0 + ai + i, self.kofs(k1 + (akc + q) * 4)
            load = store(ra4[t], deref(cast(address_of(a[self.ops.a_index(bz, row, col)]), F32X4_PTR)))
            cond = guard([(not self.guard_m, row < self.ops.m), (not self.guard_k, col < self.ops.k)])
            if cond is True:
                out.append(load)
            else:
                from hidet_framework.ir.stmt import IfStmt

                out.append(IfStmt(cond, load, seq_of([store(raf[t, e], 0.0) for e in range(4)])))
        return seq_of(out)

    def store_a(self, sa: Any, buf: Any, raf: Any, ai: Any, akc: Any) -> Any:
        """The staged A chunks -> the transposed tile ``sa[buf, k, i]``."""
        return seq_of([store(sa[buf, (akc + q) * 4 + e, ai + i], raf[t, e])
                       for t, (i, q) in enumerate(self.a_tasks) for e in range(4)])

    def copy_b(self, sb: Any, buf: Any, b: Any, bz: Any, n0: Any, k1: Any, bk0: Any, bjc: Any) -> Any:
        """B chunks of the tile at k1 -> ``sb[buf]`` by cp.async (zero-filled outside B),
        then one commit."""
        from hidet_plugin_cuda import lang as cu

        out = []
        for q, j in self.b_tasks:
            row, col = self.kofs(k1 + bk0 + q), n0 + (bjc + j) * 4
            ok = guard([(not self.guard_k, row < self.ops.k), (not self.guard_n, col < self.ops.n)])
            if ok is True:
                src, size = b[self.ops.b_index(bz, row, col)], None
            else:
                src, size = b[self.ops.b_index(bz, select(ok, row, 0), select(ok, col, 0))], select(ok, 16, 0)
            out.append(cu.cp_async(sb[buf, bk0 + q, (bjc + j) * 4], src, 16, size, "cg"))
        out.append(cu.cp_async_commit_group())
        return seq_of(out)
