"""The CPU fp32 matmul template: packed panels, a SIMD register-blocked micro-kernel,
cache blocking and OpenMP threads, written in the script DSL with task mappings.

Loop structure of the one kernel (``cpu_kernel``) it generates, per batch entry::

    for each column block of B (nc = nsplit * nsub columns):
        parallel over B panels: pack B[:, block] into nr-wide panels    (bpack, shared)
        parallel over workers w (one OpenMP thread each):
            for each work item (ic, js) of w          (task mapping repeat * spatial)
                rows  ic*mc .. +mc, columns js*nsub .. +nsub of the block
                for each K block (kc deep):
                    pack A[rows, K block] into mr-tall panels      (apack[w], private)
                    for each (A micro-panel, B micro-panel):       (order: see cpu_space)
                        micro-kernel: mr x nv SIMD accumulators, kc FMAs steps
                        not the last K block: keep the partial sums (cpart[w])
                        the last one: store C through c[...] = ... (predicated at edges)

Fusion (DESIGN.md section 7): inputs are read only by the packing loops, through
tensor-element reads ``a[element_index(...)]`` / ``b[...]``; the output is written only
by ``c[...] = value`` in the final store, exactly once per element. Partial sums of
the K blocks therefore live in a workspace, never in C.

Edges: panels are zero-padded (rows past M in A, columns past N in B), so the
micro-kernel always runs a full tile; only the store to C is predicated.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.dtypes import float32, vector_type
from hidet_framework.ir.mapping import repeat, spatial
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f32, local_tensor, parallel, register_tensor, script, script_module,
    static_range, unroll,
)
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.tuner.template import Template

from hidet_plugin_matmul.cpu_space import cpu_matmul_space, target_facts
from hidet_plugin_matmul.operators import OPERATOR, element_index

__all__ = ["CpuPackedMatmul", "build_cpu_matmul"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _shape_plan(attributes: Mapping[str, Any], params: Mapping[str, Any], cores: int) -> dict:
    """Blocks clamped to this shape (the space never saw it): no block larger than the
    padded problem, so small shapes allocate small workspaces."""
    m, n, k = (int(attributes[x]) for x in ("m", "n", "k"))
    mr, nr = int(params["mr"]), int(params["nr"])
    kc = max(1, min(int(params["kc"]), k))
    mc = max(mr, min(int(params["mc"]) // mr * mr, _ceil_div(max(m, 1), mr) * mr))
    panels_total = max(1, _ceil_div(n, nr))
    sub_panels = max(1, min(int(params["nsub"]) // nr, panels_total))
    nsplit = max(1, min(int(params["nsplit"]), _ceil_div(panels_total, sub_panels)))
    return {
        "m": m, "n": n, "k": k, "mr": mr, "nr": nr, "kc": kc, "mc": mc,
        "k_blocks": max(1, _ceil_div(k, kc)),
        "m_tiles": mc // mr,                       # micro-panels of A per work item
        "m_items": _ceil_div(max(m, 1), mc),
        "sub_panels": sub_panels,                  # B micro-panels per work item
        "block_panels": sub_panels * nsplit,       # B panels packed at a time
        "n_blocks": _ceil_div(panels_total, sub_panels * nsplit),
        "panels_total": panels_total,
        "nsplit": nsplit,
        "workers": cores,
    }


def build_cpu_matmul(attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any,
                     name: str = "matmul_cpu_packed") -> ScheduledTask:
    facts = target_facts(target)
    p = _shape_plan(attributes, params, facts["cores"])
    lanes = int(params.get("lanes", facts["lanes"]))
    if p["nr"] % lanes:
        raise ValueError(f"nr={p['nr']} is not a multiple of the vector width ({lanes} lanes)")
    vec = vector_type(float32, lanes) if lanes > 1 else float32
    vec_ptr = PointerType(vec)
    nv = p["nr"] // lanes
    m, n, k, mr, nr, kc, mc = (p[x] for x in ("m", "n", "k", "mr", "nr", "kc", "mc"))
    batch = int(attributes.get("batch", 1))
    a_rank, b_rank = int(attributes["a_rank"]), int(attributes["b_rank"])
    a_batched, b_batched = bool(attributes["a_batched"]), bool(attributes["b_batched"])
    out_rank = int(attributes["out_rank"])
    ba = batch if a_batched else 1
    bb = batch if b_batched else 1
    a_shape = (ba, m, k) if a_rank == 3 else (m, k)
    b_shape = (bb, k, n) if b_rank == 3 else (k, n)
    c_shape = (batch, m, n) if out_rank == 3 else (m, n)
    workers = p["workers"]
    m_tiles, sub_panels, block_panels = p["m_tiles"], p["sub_panels"], p["block_panels"]
    k_blocks, n_blocks, nsplit = p["k_blocks"], p["n_blocks"], p["nsplit"]
    panels_total = p["panels_total"]
    n_items = p["m_items"] * nsplit
    # Work items go to workers round-robin: with nsplit == workers, worker w always gets
    # column sub-block w, so its B sub-block stays in its own L2 across row blocks.
    items = repeat(_ceil_div(n_items, workers)) * spatial(workers)
    a_in_l1 = params.get("order", "a_in_l1") == "a_in_l1"
    ku = int(params.get("ku", 4))
    apack_size = m_tiles * kc * mr          # per worker
    cpart_size = m_tiles * sub_panels * mr * nr if k_blocks > 1 else 1
    bpack_size = max(1, block_panels * k * nr)

    def a_index(bi, row, col):
        return element_index(a_rank, a_batched, bi, row, col)

    def b_index(bi, row, col):
        return element_index(b_rank, b_batched, bi, row, col)

    def c_index(bi, row, col):
        return element_index(out_rank, True, bi, row, col)

    @script
    def matmul_cpu_packed(a: f32[a_shape], b: f32[b_shape], c: f32[c_shape], bpack: f32[bpack_size],
                          apack: f32[workers * apack_size], cpart: f32[workers * cpart_size]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for bi in range(batch):
            for nb in range(n_blocks):
                # ---- pack B[:, block] into panels [panel][k][nr], zero past N
                for pp in parallel(block_panels):
                    col0 = (nb * block_panels + pp) * nr
                    if col0 < n:
                        if col0 + nr <= n:
                            for kk in range(k):
                                for j in range(nr):
                                    bpack[(pp * k + kk) * nr + j] = b[b_index(bi, kk, col0 + j)]
                        else:
                            for kk in range(k):
                                for j in range(nr):
                                    bpack[(pp * k + kk) * nr + j] = b[b_index(bi, kk, col0 + j)] if col0 + j < n else 0.0
                # ---- compute: each worker is one thread
                for w in parallel(workers):
                    acc = register_tensor(vec, [mr, nv])
                    bv = register_tensor(vec, [nv])
                    tile = local_tensor(f32, [mr * nr])
                    for it in items.on(w):
                        if it < n_items:
                            row_base = (it // nsplit) * mc
                            panel_base = (it % nsplit) * sub_panels  # within the block
                            n_panels = min(sub_panels, panels_total - nb * block_panels - panel_base)
                            n_tiles = min(m_tiles, (m - row_base + mr - 1) // mr)
                            for kb in range(k_blocks):
                                pc = kb * kc
                                kcur = min(kc, k - pc)
                                # ---- pack A[rows, pc:pc+kcur] into panels [tile][kc][mr], zero past M
                                for t in range(n_tiles):
                                    for i in range(mr):
                                        row = row_base + t * mr + i
                                        dst = (w * m_tiles + t) * kc * mr + i
                                        if row < m:
                                            for kk in range(kcur):
                                                apack[dst + kk * mr] = a[a_index(bi, row, pc + kk)]
                                        else:
                                            for kk in range(kcur):
                                                apack[dst + kk * mr] = 0.0
                                for outer in range(n_tiles if a_in_l1 else n_panels):
                                    for inner in range(n_panels if a_in_l1 else n_tiles):
                                        ti = outer if a_in_l1 else inner
                                        jp = inner if a_in_l1 else outer
                                        # ---- micro-kernel: acc[mr, nv] += A panel x B panel
                                        part = ((w * m_tiles + ti) * sub_panels + jp) * mr * nr
                                        if k_blocks > 1:
                                            if kb == 0:
                                                for i in static_range(mr):
                                                    for v in static_range(nv):
                                                        acc[i, v] = cast(0.0, vec)
                                            else:
                                                for i in static_range(mr):
                                                    for v in static_range(nv):
                                                        acc[i, v] = deref(cast(address_of(cpart[part + i * nr + v * lanes]), vec_ptr))
                                        else:
                                            for i in static_range(mr):
                                                for v in static_range(nv):
                                                    acc[i, v] = cast(0.0, vec)
                                        a_base = (w * m_tiles + ti) * kc * mr
                                        b_base = ((panel_base + jp) * k + pc) * nr
                                        for kk in unroll(kcur, ku):
                                            for v in static_range(nv):
                                                bv[v] = deref(cast(address_of(bpack[b_base + kk * nr + v * lanes]), vec_ptr))
                                            for i in static_range(mr):
                                                av = apack[a_base + kk * mr + i]
                                                for v in static_range(nv):
                                                    acc[i, v] += cast(av, vec) * bv[v]
                                        if kb == k_blocks - 1:
                                            # ---- final store: C only through element stores
                                            for i in static_range(mr):
                                                for v in static_range(nv):
                                                    tp = cast(address_of(tile[i * nr + v * lanes]), vec_ptr)
                                                    tp[0] = acc[i, v]
                                            row0 = row_base + ti * mr
                                            col0 = (nb * block_panels + panel_base + jp) * nr
                                            if row0 + mr <= m and col0 + nr <= n:
                                                for i in range(mr):
                                                    for j in range(nr):
                                                        c[c_index(bi, row0 + i, col0 + j)] = tile[i * nr + j]
                                            else:
                                                for i in range(mr):
                                                    for j in range(nr):
                                                        if row0 + i < m and col0 + j < n:
                                                            c[c_index(bi, row0 + i, col0 + j)] = tile[i * nr + j]
                                        else:
                                            for i in static_range(mr):
                                                for v in static_range(nv):
                                                    pp_ = cast(address_of(cpart[part + i * nr + v * lanes]), vec_ptr)
                                                    pp_[0] = acc[i, v]

    module = script_module(matmul_cpu_packed, name=name)
    workspace = (WorkspaceSpec("bpack", "float32", (bpack_size,)),
                 WorkspaceSpec("apack", "float32", (workers * apack_size,)),
                 WorkspaceSpec("cpart", "float32", (workers * cpart_size,)))
    launch = Launch(name, (BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0),
                           BufferRef("workspace", 0), BufferRef("workspace", 1), BufferRef("workspace", 2)))
    return ScheduledTask(module, (launch,), workspace, source="matmul.cpu_packed", params=dict(params))


class CpuPackedMatmul(Template):
    """fp32 matmul on the CPU: packed panels + SIMD micro-kernel + cache blocks + OpenMP."""

    name = "matmul.cpu_packed"
    operator = OPERATOR
    target = "cpu"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return all(t.dtype.name == "float32" for t in list(task.inputs) + list(task.outputs))

    def space(self, target: Any, level: int) -> list[dict]:
        return cpu_matmul_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_cpu_matmul(attributes, params, target)
