"""The loop skeleton of the CPU matmul kernels of the full-K packing order.

The float32 kernel (cpu_template.py), the bfloat16 pair kernel (cpu_bf16_pairs.py) and
the AMX tile kernel (cpu_amx_tiles.py) distribute the work the same way and differ only
in their panels and micro-kernel; `build_full_k_kernel` writes the shared part once and
takes those as `FullKPieces`::

    parallel over workers w:                               (one thread each)
        [worker_setup]
        for each of w's q column sub-blocks sb (<= nsub columns), w's row part:
            for each batch entry:
                [pack_b_panel] B[:, sb], all of K, panel by panel (bpack[w], private)
                for each mc-row block of the row part:
                    for each K block (kc deep; K padded to k_padded):
                        [pack_a] A[rows, K block]                 (apack[w], private)
                        for each (A micro-panel, B micro-panel):  (order: cpu_space)
                            [micro_kernel]: partial sums in cpart[w] between K blocks
                            the last K block: C through c[...] = ... (predicated)
        [worker_teardown]

The pieces in brackets are the kernel's: the packing loops and the worker's setup are
`InlineFragment`s (written in place, so the generated code is each kernel's own; A and B
are read only there and C written only by the final store: the fusion contract of
cpu_template.py), the micro-kernel a ``device`` function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, i32, local_tensor, parallel, script, script_module
from hidet_framework.lang.inline_fragment import InlineFragment, inline_fragment
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec

__all__ = ["FullKPieces", "build_full_k_kernel", "partial_sums_size", "partial_sums_slot", "packed_scheduled_task",
           "make_store_c_tile"]


@dataclass(frozen=True)
class FullKPieces:
    """What one kernel brings to the skeleton. Buffer sizes are per worker, in elements
    of `pack_dtype` (the A and B panels; partial sums are float32)."""

    pack_dtype: str            # "float32" or "bfloat16": the panels' element type
    k_padded: int              # K rows of a B panel (K padded to what a micro-kernel step takes)
    bpack_size: int
    apack_size: int
    micro_kernel: Any          # (apack, bpack, cpart, tile, a_base, b_base, part, kb, kcur / k_step)
    pack_b_panel: InlineFragment   # (b, bpack, bi, col0, dst): B[:, col0:col0+nr] into the panel at dst
    pack_a: InlineFragment     # (a, apack, w, bi, row_base, row_hi, n_tiles, pc, kcur): an A block
    k_step: int = 1            # K values a micro-kernel step takes (its last argument: steps)
    # the float32 kernel names the partial sums' slot in a variable; the others pass it
    # in the call (the generated code of each is kept as it was)
    name_part_slot: bool = False
    worker_setup: Optional[InlineFragment] = None      # (): before a worker's share
    worker_teardown: Optional[InlineFragment] = None   # (): after it


def partial_sums_size(p: Mapping[str, Any]) -> int:
    """Per worker: the partial sums of its mc x nsub block of C (one element when there
    is a single K block: the micro-kernel never reads or writes them)."""
    return p["m_tiles"] * p["sub_panels"] * p["mr"] * p["nr"] if p["k_blocks"] > 1 else 1


def partial_sums_slot(a_in_l1: bool, m_tiles: int, sub_panels: int, tile: int):
    """part_of(w, ti, jp): where worker w keeps the partial sums of tile (ti, jp) between
    K blocks, laid out in the order the micro-kernel calls visit the tiles (the inner
    loop's tiles adjacent), so the calls walk the workspace as one forward stream."""
    if a_in_l1:
        return lambda w, ti, jp: ((w * m_tiles + ti) * sub_panels + jp) * tile
    return lambda w, ti, jp: ((w * sub_panels + jp) * m_tiles + ti) * tile


def make_store_c_tile(ops: Any, tc: Any, mr: int, nr: int, n: int) -> InlineFragment:
    """The final store of an mr x nr tile to C, through element stores only (fusion
    grafts onto them); predicated at the edges of M (rows up to row_hi) and N."""
    c_index = ops.c_index

    @inline_fragment
    @script
    def store_c_tile(c: tc[ops.c_shape], tile: f32[mr * nr], bi: i32, row_base: i32, ti: i32, panel0: i32, jp: i32,
                     row_hi: i32):
        row0 = row_base + ti * mr
        col0 = (panel0 + jp) * nr
        if row0 + mr <= row_hi and col0 + nr <= n:
            for i in range(mr):
                for j in range(nr):
                    c[c_index(bi, row0 + i, col0 + j)] = tile[i * nr + j]
        else:
            for i in range(mr):
                for j in range(nr):
                    if row0 + i < row_hi and col0 + j < n:
                        c[c_index(bi, row0 + i, col0 + j)] = tile[i * nr + j]

    return store_c_tile


def packed_scheduled_task(kernel: Any, name: str, params: Mapping[str, Any], pack_dtype: str, bpack: int, apack: int,
                          cpart: int) -> ScheduledTask:
    """One launch of `kernel` over A, B, C and its three packing workspaces (sizes for
    all workers; the panels of `pack_dtype`, the partial sums float32)."""
    workspace = (WorkspaceSpec("bpack", pack_dtype, (bpack,)), WorkspaceSpec("apack", pack_dtype, (apack,)),
                 WorkspaceSpec("cpart", "float32", (cpart,)))
    launch = Launch(name, (BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0),
                           BufferRef("workspace", 0), BufferRef("workspace", 1), BufferRef("workspace", 2)))
    return ScheduledTask(script_module(kernel, name=name), (launch,), workspace, source="matmul.cpu_packed",
                         params=dict(params))


def build_full_k_kernel(p: Mapping[str, Any], ops: Any, params: Mapping[str, Any], name: str, annotations: tuple,
                        pieces: FullKPieces) -> ScheduledTask:
    """The kernel for the block plan `p` (cpu_template._shape_plan, clamped for the
    kernel), the operands `ops` (MatmulOperands) and the annotations of A, B, C and the
    panels."""
    ta, tb, tc, tp = annotations
    m, n, mr, nr, kc, mc = (p[x] for x in ("m", "n", "mr", "nr", "kc", "mc"))
    batch, b_batched = ops.batch, ops.b_batched
    workers, m_tiles, sub_panels = p["workers"], p["m_tiles"], p["sub_panels"]
    k_blocks, panels_total, rows_per_part = p["k_blocks"], p["panels_total"], p["rows_per_part"]
    # Worker w owns N sub-blocks jw*q .. jw*q+q-1 and M part iw: (jw, iw) from the
    # spatial mapping, its q sub-blocks from a loop (q grows with N: a loop, never
    # unrolled, so the code's size does not). One parallel region for the whole task.
    work, per_worker = spatial(p["wn"], p["wm"]), p["per_worker"]
    a_in_l1 = params.get("order", "a_in_l1") == "a_in_l1"
    part_of = partial_sums_slot(a_in_l1, m_tiles, sub_panels, mr * nr)
    k_padded, k_step, name_part_slot = pieces.k_padded, pieces.k_step, pieces.name_part_slot
    bpack_size, apack_size, cpart_size = pieces.bpack_size, pieces.apack_size, partial_sums_size(p)
    micro_kernel, pack_b_panel, pack_a = pieces.micro_kernel, pieces.pack_b_panel, pieces.pack_a
    worker_setup, worker_teardown = pieces.worker_setup, pieces.worker_teardown
    store_c_tile = make_store_c_tile(ops, tc, mr, nr, n)

    @script
    def matmul_cpu_full_k(a: ta[ops.a_shape], b: tb[ops.b_shape], c: tc[ops.c_shape], bpack: tp[workers * bpack_size],
                          apack: tp[workers * apack_size], cpart: f32[workers * cpart_size]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(workers):
            tile = local_tensor(f32, [mr * nr])
            if worker_setup is not None:
                worker_setup()
            for jw, iw in work.on(w):
              for q in range(per_worker):
                sb = jw * per_worker + q
                panel0 = sb * sub_panels
                n_panels = min(sub_panels, panels_total - panel0)
                row_lo = iw * rows_per_part
                row_hi = min(m, row_lo + rows_per_part)
                if n_panels > 0 and row_lo < row_hi:
                    for bi in range(batch):
                        if b_batched or bi == 0:
                            # ---- pack B[:, sub-block] (all of K), panel by panel, into w's panels
                            for pp in range(n_panels):
                                col0 = (panel0 + pp) * nr
                                dst = (w * sub_panels + pp) * k_padded * nr
                                pack_b_panel(b, bpack, bi, col0, dst)
                        for mb in range((row_hi - row_lo + mc - 1) // mc):
                            row_base = row_lo + mb * mc
                            n_tiles = min(m_tiles, (row_hi - row_base + mr - 1) // mr)
                            for kb in range(k_blocks):
                                pc = kb * kc
                                kcur = min(kc, k_padded - pc)
                                pack_a(a, apack, w, bi, row_base, row_hi, n_tiles, pc, kcur)
                                for outer in range(n_tiles if a_in_l1 else n_panels):
                                    for inner in range(n_panels if a_in_l1 else n_tiles):
                                        ti = outer if a_in_l1 else inner
                                        jp = inner if a_in_l1 else outer
                                        if name_part_slot:
                                            part = part_of(w, ti, jp)
                                        a_base = (w * m_tiles + ti) * kc * mr
                                        b_base = ((w * sub_panels + jp) * k_padded + pc) * nr
                                        micro_kernel(apack, bpack, cpart, tile, a_base, b_base,
                                                     part if name_part_slot else part_of(w, ti, jp), kb,
                                                     kcur if k_step == 1 else kcur / k_step)
                                        if kb == k_blocks - 1:
                                            # ---- final store: C only through element stores
                                            store_c_tile(c, tile, bi, row_base, ti, panel0, jp, row_hi)
            if worker_teardown is not None:
                worker_teardown()

    return packed_scheduled_task(matmul_cpu_full_k, name, params, pieces.pack_dtype, workers * bpack_size,
                                 workers * apack_size, workers * cpart_size)
