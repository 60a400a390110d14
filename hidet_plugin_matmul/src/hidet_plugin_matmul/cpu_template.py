"""The CPU matmul template: packed panels, a SIMD register-blocked micro-kernel,
cache blocking and OpenMP threads, written in the script DSL with task mappings.

Operands float32, bfloat16 or float16 (cpu_operand_types.py): the packing loops widen
half inputs to the float32 panels, C is rounded once at the store. bfloat16 x bfloat16
on a target with avx512_bf16 builds the pair kernel of cpu_bf16_pairs.py (vdpbf16ps,
bfloat16 panels) in this loop order instead, and on a target with amx_tile and amx_bf16
the tile kernel of cpu_amx_tiles.py (tdpbf16ps, 32 x 32 blocks of C).

Loop structure of the one kernel (``cpu_kernel``) it generates: one OpenMP parallel
region; the workers form a grid wn x wm (wn across N, wm across M; task mapping
``spatial(wn, wm) * repeat(q, 1)``). The three kernels of this order (float32 panels
here, bfloat16 pairs, AMX tiles) share these loops (cpu_full_k_skeleton.py) and bring
their packing loops and micro-kernel::

    parallel over workers w:                               (one thread each)
        for each of w's q column sub-blocks sb (<= nsub columns), w's row part:
            for each batch entry:
                pack B[:, sb] (all of K) into nr-wide panels      (bpack[w], private)
                for each mc-row block of the row part:
                    for each K block (kc deep):
                        pack A[rows, K block] into mr-tall panels (apack[w], private)
                        for each (A micro-panel, B micro-panel):  (order: cpu_space)
                            micro-kernel: mr x nv SIMD accumulators, kc FMA steps
                            not the last K block: keep partial sums  (cpart[w])
                            the last one: store C through c[...] = ... (predicated)

Everything is private to a worker, so there is no barrier inside the task: under a
loaded machine one slow thread delays only its own share.

Fusion (docs/design.md, Fusion): inputs are read only by the packing loops, through
tensor-element reads ``a[element_index(...)]`` / ``b[...]``; the output is written only
by ``c[...] = value`` in the final store, exactly once per element. Partial sums of
the K blocks therefore live in a workspace, never in C.

A second loop order, for short M and batches, is chosen by the candidate key
``bpack="block"`` (``_build_block``): B packed kc x nsub at a time inside the K loop,
work items over (batch entry, N sub-block). Same fusion contract, same padding.

Edges: panels are zero-padded (rows past M in A, columns past N in B), so the
micro-kernel always runs a full tile; only the store to C is predicated.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.dtypes import float32, vector_type
from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, i32, local_tensor, parallel, script
from hidet_framework.lang.inline_fragment import InlineFragment, inline_fragment
from hidet_framework.schedule.scheduled_task import ScheduledTask
from hidet_framework.tuner.template import Template

from hidet_plugin_matmul.cpu_amx_tiles import amx_apply, amx_plan_params, build_amx_tiles
from hidet_plugin_matmul.cpu_bf16_pairs import build_bf16_pairs, pairs_apply
from hidet_plugin_matmul.cpu_full_k_skeleton import (
    FullKPieces, build_full_k_kernel, make_store_c_tile, packed_scheduled_task, partial_sums_size, partial_sums_slot,
)
from hidet_plugin_matmul.cpu_microkernel import make_micro_kernel
from hidet_plugin_matmul.cpu_operand_types import (
    FLOAT32_OPERANDS, OPERAND_DTYPES, operand_annotations, task_operand_dtypes,
)
from hidet_plugin_matmul.cpu_space import cpu_matmul_space, target_facts
from hidet_plugin_matmul.operators import OPERATOR, MatmulOperands

__all__ = ["CpuPackedMatmul", "build_cpu_matmul"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _worker_grid(workers: int, panels_total: int, row_tiles: int, prefer: str) -> tuple[int, int]:
    """(wn, wm): workers across N and across M, wn * wm == workers. `prefer` "n" gives
    N as many workers as it has B panels for (each worker then streams its own B
    columns from its own L2); "m" gives M as many as it has row tiles for."""
    divisors = [d for d in range(1, workers + 1) if workers % d == 0]
    if prefer == "m":
        wm = max([d for d in divisors if d <= row_tiles] or [1])
        return workers // wm, wm
    wn = max([d for d in divisors if d <= panels_total] or [1])
    return wn, workers // wn


def _shape_plan(attributes: Mapping[str, Any], params: Mapping[str, Any], workers: int) -> dict:
    """Blocks clamped to this shape (the space never saw it): N is cut into equal
    sub-blocks, a multiple of the N-workers, none wider than ``nsub``; M into one part
    per M-worker, walked in ``mc`` rows; no block larger than the padded problem."""
    m, n, k = (int(attributes[x]) for x in ("m", "n", "k"))
    mr, nr = int(params["mr"]), int(params["nr"])
    kc = max(1, min(int(params["kc"]), k))
    panels_total = max(1, _ceil_div(n, nr))
    row_tiles = max(1, _ceil_div(m, mr))
    wn, wm = _worker_grid(workers, panels_total, row_tiles, params.get("split", "n"))
    max_sub = max(1, int(params["nsub"]) // nr)
    per_worker = _ceil_div(panels_total, wn * max_sub)       # sub-blocks per N-worker
    sub_panels = _ceil_div(panels_total, wn * per_worker)   # panels per sub-block
    rows_per_part = _ceil_div(row_tiles, wm) * mr
    mc = max(mr, min(int(params["mc"]) // mr * mr, rows_per_part))
    return {
        "m": m, "n": n, "k": k, "mr": mr, "nr": nr, "kc": kc, "mc": mc,
        "k_blocks": max(1, _ceil_div(k, kc)), "m_tiles": mc // mr, "panels_total": panels_total,
        "sub_panels": sub_panels, "per_worker": per_worker, "rows_per_part": rows_per_part,
        "wn": wn, "wm": wm, "workers": workers,
    }


def _plan_and_vector(plan: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                     target: Any) -> tuple:
    """(the variant's block plan for this shape, SIMD lanes, the vector type)."""
    facts = target_facts(target)
    p = plan(attributes, params, int(params.get("workers", facts["cores"])))
    lanes = int(params.get("lanes", facts["lanes"]))
    if p["nr"] % lanes:
        raise ValueError(f"nr={p['nr']} is not a multiple of the vector width ({lanes} lanes)")
    return p, lanes, vector_type(float32, lanes) if lanes > 1 else float32


def _make_pack_a(ops: Any, ta: Any, mr: int, kc: int, m_tiles: int, apack_len: int) -> InlineFragment:
    """A[rows, pc:pc+kcur] into w's float32 panels [tile][kc][mr], zero past M (rows
    from row_hi): both loop orders."""
    a_index = ops.a_index

    @inline_fragment
    @script
    def pack_a(a: ta[ops.a_shape], apack: f32[apack_len], w: i32, bi: i32, row_base: i32, row_hi: i32, n_tiles: i32,
               pc: i32, kcur: i32):
        for t in range(n_tiles):
            for i in range(mr):
                row = row_base + t * mr + i
                dst = (w * m_tiles + t) * kc * mr + i
                if row < row_hi:
                    for kk in range(kcur):
                        apack[dst + kk * mr] = a[a_index(bi, row, pc + kk)]
                else:
                    for kk in range(kcur):
                        apack[dst + kk * mr] = 0.0

    return pack_a


def _make_pack_b_panel(ops: Any, tb: Any, p: Mapping[str, Any], bpack_len: int) -> InlineFragment:
    """B[:, col0:col0+nr] (all of K) into the float32 panel [k][nr] at dst, zero past N."""
    n, k, nr = (p[x] for x in ("n", "k", "nr"))
    b_index = ops.b_index

    @inline_fragment
    @script
    def pack_b_panel(b: tb[ops.b_shape], bpack: f32[bpack_len], bi: i32, col0: i32, dst: i32):
        if col0 + nr <= n:
            for kk in range(k):
                for j in range(nr):
                    bpack[dst + kk * nr + j] = b[b_index(bi, kk, col0 + j)]
        else:
            for kk in range(k):
                for j in range(nr):
                    bpack[dst + kk * nr + j] = b[b_index(bi, kk, col0 + j)] if col0 + j < n else 0.0

    return pack_b_panel


def build_cpu_matmul(attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any,
                     name: str = "matmul_cpu_packed", operand_dtypes: tuple = FLOAT32_OPERANDS) -> ScheduledTask:
    """`operand_dtypes`: the element types of A, B and C (`operand_annotations`)."""
    ta, tb, tc = operand_annotations(operand_dtypes)
    if params.get("bpack", "full") == "block":
        return _build_block(attributes, params, target, name, (ta, tb, tc))
    ops = MatmulOperands(attributes)
    if amx_apply(target, operand_dtypes, params):     # bfloat16 tiles, tdpbf16ps (cpu_amx_tiles.py)
        amx_params = amx_plan_params(params)
        p = _shape_plan(attributes, amx_params, int(params.get("workers", target_facts(target)["cores"])))
        p = dict(p, kc=min(amx_params["kc"], -(-p["k"] // 32) * 32))    # no deeper than K padded
        return build_amx_tiles(p, ops, params, name, tc)
    p, lanes, vec = _plan_and_vector(_shape_plan, attributes, params, target)
    if pairs_apply(target, operand_dtypes, params):   # bfloat16 pairs, vdpbf16ps (cpu_bf16_pairs.py)
        kc = p["kc"] + p["kc"] % 2
        p = dict(p, kc=kc, k_blocks=_ceil_div(p["k"] + p["k"] % 2, kc))
        return build_bf16_pairs(p, ops, params, name, tc)
    # float32 panels (half operands widened by the packing loops), the SIMD micro-kernel
    k, mr, nr, kc = (p[x] for x in ("k", "mr", "nr", "kc"))
    workers, m_tiles, sub_panels = p["workers"], p["m_tiles"], p["sub_panels"]
    ku = int(params.get("ku", 4))
    bpack_size = sub_panels * max(k, 1) * nr     # per worker: its B sub-block, all of K
    apack_size = m_tiles * kc * mr                # per worker: mc x kc of A
    micro_kernel = make_micro_kernel(name, vec, lanes, mr, nr, ku, p["k_blocks"], workers * apack_size,
                                     workers * bpack_size, workers * partial_sums_size(p))
    pieces = FullKPieces("float32", k, bpack_size, apack_size, micro_kernel,
                         _make_pack_b_panel(ops, tb, p, workers * bpack_size),
                         _make_pack_a(ops, ta, mr, kc, m_tiles, workers * apack_size), name_part_slot=True)
    return build_full_k_kernel(p, ops, params, name, (ta, tb, tc, f32), pieces)


def _block_plan(attributes: Mapping[str, Any], params: Mapping[str, Any], workers: int) -> dict:
    """Blocks of the ``bpack="block"`` variant, clamped to this shape: work items are
    (batch entry, N sub-block) pairs, their count made a multiple of the workers where
    N has enough panels for it; each item covers all M rows, walked in ``mc`` rows."""
    m, n, k = (int(attributes[x]) for x in ("m", "n", "k"))
    batch = int(attributes.get("batch", 1))
    mr, nr = int(params["mr"]), int(params["nr"])
    kc = max(1, min(int(params["kc"]), k))
    panels_total = max(1, _ceil_div(n, nr))
    max_sub = max(1, int(params["nsub"]) // nr)
    nsb = min(panels_total, _ceil_div(panels_total, max_sub))
    for more in range(nsb, min(panels_total, nsb * workers) + 1):
        if (batch * more) % workers == 0:
            nsb = more
            break
    sub_panels = _ceil_div(panels_total, nsb)
    nsb = _ceil_div(panels_total, sub_panels)
    items = batch * nsb
    mc = max(mr, min(int(params["mc"]) // mr * mr, _ceil_div(max(m, 1), mr) * mr))
    return {
        "m": m, "n": n, "k": k, "mr": mr, "nr": nr, "kc": kc, "mc": mc, "batch": batch,
        "k_blocks": max(1, _ceil_div(k, kc)), "m_tiles": mc // mr, "panels_total": panels_total,
        "sub_panels": sub_panels, "nsb": nsb, "items": items, "per_worker": _ceil_div(items, workers),
        "workers": workers,
    }


def _build_block(attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any,
                 name: str, annotations: tuple) -> ScheduledTask:
    """The ``bpack="block"`` variant (GotoBLAS-like loop order, for short M and batches):

        parallel over workers w: for each of w's items (batch entry bi, N sub-block sb):
            for each mc-row block:
                for each K block (kc deep):
                    pack A[rows, K block] (mc x kc) and B[K block, sb] (kc x nsub,
                    read row by row: contiguous) into w's private buffers
                    micro-kernels over (A micro-panel, B micro-panel), partial sums
                    of the K blocks in cpart[w] (mc x nsub), the last one stores C

    B is packed only kc rows at a time, into a block that stays in cache: with a short
    M, B is read from memory once and never written back (the full-K variant writes
    and re-reads a K x nsub copy). Items are whole (batch entry, sub-block) pairs, so a
    batch is spread over the workers without both packing the same A rows."""
    p, lanes, vec = _plan_and_vector(_block_plan, attributes, params, target)
    ta, tb, tc = annotations
    m, n, k, mr, nr, kc, mc = (p[x] for x in ("m", "n", "k", "mr", "nr", "kc", "mc"))
    ops = MatmulOperands(attributes)
    b_index = ops.b_index
    workers, m_tiles, sub_panels, nsb = p["workers"], p["m_tiles"], p["sub_panels"], p["nsb"]
    k_blocks, panels_total, items = p["k_blocks"], p["panels_total"], p["items"]
    work = spatial(workers)   # worker w: items w*q .. w*q+q-1, q in a loop (grows with N)
    per_worker = p["per_worker"]
    a_in_l1 = params.get("order", "a_in_l1") == "a_in_l1"
    ku = int(params.get("ku", 4))
    bblk_size = sub_panels * kc * nr              # per worker: kc x nsub of B
    apack_size = m_tiles * kc * mr                # per worker: mc x kc of A
    cpart_size = partial_sums_size(p)
    part_of = partial_sums_slot(a_in_l1, m_tiles, sub_panels, mr * nr)
    micro_kernel = make_micro_kernel(name, vec, lanes, mr, nr, ku, k_blocks, workers * apack_size,
                                     workers * bblk_size, workers * cpart_size)
    pack_a = _make_pack_a(ops, ta, mr, kc, m_tiles, workers * apack_size)
    store_c_tile = make_store_c_tile(ops, tc, mr, nr, n)

    @script
    def matmul_cpu_block(a: ta[ops.a_shape], b: tb[ops.b_shape], c: tc[ops.c_shape], bblk: f32[workers * bblk_size],
                         apack: f32[workers * apack_size], cpart: f32[workers * cpart_size]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(workers):
            tile = local_tensor(f32, [mr * nr])
            for jw in work.on(w):
              for q in range(per_worker):
                it = jw * per_worker + q
                if it < items:
                    bi = it / nsb
                    panel0 = (it % nsb) * sub_panels
                    n_panels = min(sub_panels, panels_total - panel0)
                    for mb in range((m + mc - 1) // mc):
                        row_base = mb * mc
                        n_tiles = min(m_tiles, (m - row_base + mr - 1) // mr)
                        for kb in range(k_blocks):
                            pc = kb * kc
                            kcur = min(kc, k - pc)
                            pack_a(a, apack, w, bi, row_base, m, n_tiles, pc, kcur)
                            # ---- pack B[pc:pc+kcur, sub-block] row by row into [panel][kc][nr]
                            for kk in range(kcur):
                                for pp in range(n_panels):
                                    col0 = (panel0 + pp) * nr
                                    dst = ((w * sub_panels + pp) * kc + kk) * nr
                                    if col0 + nr <= n:
                                        for j in range(nr):
                                            bblk[dst + j] = b[b_index(bi, pc + kk, col0 + j)]
                                    else:
                                        for j in range(nr):
                                            bblk[dst + j] = b[b_index(bi, pc + kk, col0 + j)] if col0 + j < n else 0.0
                            for outer in range(n_tiles if a_in_l1 else n_panels):
                                for inner in range(n_panels if a_in_l1 else n_tiles):
                                    ti = outer if a_in_l1 else inner
                                    jp = inner if a_in_l1 else outer
                                    part = part_of(w, ti, jp)
                                    a_base = (w * m_tiles + ti) * kc * mr
                                    b_base = (w * sub_panels + jp) * kc * nr
                                    micro_kernel(apack, bblk, cpart, tile, a_base, b_base, part, kb, kcur)
                                    if kb == k_blocks - 1:
                                        # ---- final store: C only through element stores
                                        store_c_tile(c, tile, bi, row_base, ti, panel0, jp, m)

    return packed_scheduled_task(matmul_cpu_block, name, params, "float32", workers * bblk_size,
                                 workers * apack_size, workers * cpart_size)


class CpuPackedMatmul(Template):
    """float32/bfloat16/float16 matmul on the CPU (float32 accumulation): packed panels +
    SIMD micro-kernel + cache blocks + OpenMP."""

    name = "matmul.cpu_packed"
    operator = OPERATOR
    target = "cpu"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return all(t.dtype.name in OPERAND_DTYPES for t in list(task.inputs) + list(task.outputs))

    def space(self, target: Any, level: int) -> list[dict]:
        return cpu_matmul_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_cpu_matmul(attributes, params, target, operand_dtypes=task_operand_dtypes(task))
