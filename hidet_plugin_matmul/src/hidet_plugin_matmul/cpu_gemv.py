"""The CPU template of ``matmul_prepacked`` (short M, B packed at compile time by
`cpu_prepack.py`): GEMV for M of 1 to 4, and GEMM up to MAX_ROWS (512) rows.

    parallel over items w, one B panel p each:  (task mapping spatial(panels))
        for each K block (kc deep: the panel's kc x nr block stays in L2):
            for each block of mr rows:
                mr x nv SIMD accumulators (from the partial sums after the
                first K block), kcur FMA steps: nv panel vectors (contiguous,
                streamed from memory once) times one broadcast A value per row
                last K block: C through element stores (fusion grafts there)

A and C may be float32, bfloat16 or float16: the copy of A widens, the store to C
rounds. The panels are float32, or keep half weights' 2 bytes (``half_lanes`` in the
attributes: `cpu_half_panels.py`), widened to float32 vectors as the tile loads them:
the kernel streams half the bytes.
A is first copied by its own launch (``_copy_a``, the only reader of A, so a fused
prologue is grafted there and computed once per element; reading A in the
micro-kernel, a call argument, made every prologue fail to fuse: 60 reshape and 48 add
kernels of their own in BERT). The copy is read in place (its rows are few and stay in
cache); rows past M read row M-1 again (clamped) and are never stored, so no padding
copy is needed. B panels are
contiguous ``[K, nr]`` blocks: the kernel reads the weights exactly once per call.

Space (from the machine only): ``mr`` (rows per register tile, from the register
count: ``mr * nv`` accumulators plus nv panel vectors and a broadcast fit the file),
``kc`` (a panel block in a quarter of L2: each K block after the first reloads and
stores the tile's partial sums, and a block in L1 (kc 64 with AVX-512's 64-wide
panels) measured 5-9% slower alone on GPT-2's 128-row products, 0.5-2% in the model),
``ku`` (unroll hint). The build clamps mr to M and balances the K blocks.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.dtypes import float32, vector_type
from hidet_framework.ir.expr import minimum
from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, i32, local_tensor, parallel, script, script_module
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.tuner.template import Template

from hidet_plugin_matmul.cpu_half_panels import half_panel_load
from hidet_plugin_matmul.cpu_microkernel import make_register_tile
from hidet_plugin_matmul.cpu_operand_types import (
    FLOAT32_OPERANDS, OPERAND_DTYPES, operand_annotations, task_operand_dtypes,
)
from hidet_plugin_matmul.cpu_prepack import PREPACKED_OPERATOR
from hidet_plugin_matmul.cpu_space import FLOAT_BYTES, target_facts

__all__ = ["CpuPrepackedMatmul", "gemv_space", "build_cpu_gemv"]



def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def gemv_space(target: Any, level: int, nr: int) -> list[dict]:
    """Candidates for panels `nr` wide, the default first."""
    facts = target_facts(target)
    lanes = facts["lanes"]
    nv = max(1, nr // lanes)
    mr_max = max(1, (facts["registers"] - nv - 2) // nv)
    kc = max(16, int(facts["l2"] * 0.25 / (nr * FLOAT_BYTES)) // 16 * 16)
    rows = [mr_max] + [r for r in (4, 2, 1, 8, 6, 3) if r < mr_max]
    out = [{"mr": rows[0], "kc": kc, "ku": 4, "workers": facts["cores"]}]
    if level == 0:
        return out
    for mr in rows:
        for kc_div in (1, 4, 16):
            for ku in (4, 1):
                c = {"mr": mr, "kc": max(16, kc // kc_div), "ku": ku, "workers": facts["cores"]}
                if c not in out:
                    out.append(c)
    # one worker: a small product is over before a second thread has started
    out.append(dict(out[0], workers=1))
    return out[:30 if level == 1 else 200]


def _micro_kernel(name: str, vec: Any, lanes: int, m: int, k: int, mr: int, nr: int, ku: int, k_blocks: int,
                  panels: int, part_len: int, tb: Any = f32):
    """cpu_microkernel's register tile over A itself (rows past M read row M-1 again)
    and panel p of the prepacked B (element type `tb`) from K offset pc; partial sums
    [row][nr] from row0."""
    b_load = None
    if tb is not f32:   # where = (p, row0, pc); storage column c of the panel's row
        b_load = half_panel_load(tb.dtype.name, lanes, lambda bp, where, kk, c: bp[where[0], where[2] + kk, c])
    register_tile = make_register_tile(
        vec, lanes, mr, nr, ku, k_blocks, (f32[m, k], tb[panels, k, nr], f32[part_len]),
        # where = (p, row0, pc); rows past M: a real row, never stored
        a_at=lambda a, where, kk, i: a[minimum(where[1] + i, m - 1), where[2] + kk],
        b_at=lambda bp, where, kk, v: bp[where[0], where[2] + kk, v * lanes],
        partial_at=lambda part, where, i, v: part[(where[1] + i) * nr + v * lanes], b_load=b_load)

    @script
    def gemv_micro_kernel(a: f32[m, k], bp: tb[panels, k, nr], part: f32[part_len], tile: f32[mr * nr],
                          p: i32, row0: i32, pc: i32, kcur: i32, kb: i32):
        attrs.func_kind = "device"
        attrs.func_name = name + "_micro_kernel"
        register_tile(a, bp, part, tile, p, row0, pc, kb, kcur)

    return gemv_micro_kernel


def build_cpu_gemv(attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any,
                   name: str = "matmul_cpu_gemv", operand_dtypes: tuple = FLOAT32_OPERANDS) -> ScheduledTask:
    """`operand_dtypes`: A's, the panels' and C's element types; a half A is widened by
    the copy launch (its only reader), C rounded at the final store. Half panels (the
    attribute ``half_lanes``: their layout's vector width, which the kernel's vectors
    take) are widened as they are loaded."""
    ta, tb, tc = operand_annotations(operand_dtypes)
    half_lanes = int(attributes.get("half_lanes", 0))
    if (tb is not f32) != (half_lanes > 0):
        raise ValueError(f"matmul_prepacked: {operand_dtypes[1]} panels with half_lanes={half_lanes} (pack_b)")
    m, n, k, nr = (int(attributes[x]) for x in ("m", "n", "k", "nr"))
    facts = target_facts(target)
    lanes = half_lanes or (facts["lanes"] if nr % facts["lanes"] == 0 else 1)
    vec = vector_type(float32, lanes) if lanes > 1 else float32
    mr = max(1, min(int(params["mr"]), m))
    kc = max(1, min(int(params["kc"]), k))
    kc = _ceil_div(k, _ceil_div(k, kc))      # balanced K blocks (no short last block)
    ku = int(params.get("ku", 4))
    workers = max(1, int(params.get("workers", facts["cores"])))
    panels = _ceil_div(n, nr)
    # parallel items: one B panel each (the thread pool claims them a few at a time:
    # a thread that finishes early takes the next, a descheduled one holds back only
    # what it claimed); one worker: every panel in one item. Session 10: four items
    # a thread (36 panels as 7 x 5 + 1) ran GPT-2's 128x2304x768 at 125-162 GFLOP/s on
    # two Zen 4 cores against 199 with one panel an item (fastest of 41 calls).
    items = panels if workers > 1 else 1
    k_blocks = _ceil_div(k, kc)
    row_blocks = _ceil_div(m, mr)
    part_len = row_blocks * mr * nr if k_blocks > 1 else 1
    micro_kernel = _micro_kernel(name, vec, lanes, m, k, mr, nr, ku, k_blocks, panels, part_len, tb)
    owner = spatial(items)

    @script
    def matmul_cpu_gemv_copy_a(a: ta[m, k], ac: f32[m, k]):
        # A's only reader: a fused prologue (reshape, GELU of the previous layer...) is
        # grafted here and computed once per element, not once per B panel.
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name + "_copy_a"
        for r in parallel(m):
            for kk in range(k):
                ac[r, kk] = a[r, kk]

    @script
    def matmul_cpu_gemv(a: f32[m, k], bp: tb[panels, k, nr], c: tc[m, n]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(items):
            tile = local_tensor(f32, [mr * nr])
            part = local_tensor(f32, [part_len])
            for jw in owner.on(w):
                for p in range(jw * panels // items, (jw + 1) * panels // items):
                    col0 = p * nr
                    for kb in range(k_blocks):
                        pc = kb * kc
                        kcur = min(kc, k - pc)
                        for rb in range(row_blocks):
                            row0 = rb * mr
                            micro_kernel(a, bp, part, tile, p, row0, pc, kcur, kb)
                            if kb == k_blocks - 1:
                                if row0 + mr <= m and col0 + nr <= n:
                                    for i in range(mr):
                                        for j in range(nr):
                                            c[row0 + i, col0 + j] = tile[i * nr + j]
                                else:
                                    for i in range(mr):
                                        for j in range(nr):
                                            if row0 + i < m and col0 + j < n:
                                                c[row0 + i, col0 + j] = tile[i * nr + j]

    launches = (Launch(name + "_copy_a", (BufferRef("input", 0), BufferRef("workspace", 0))),
                Launch(name, (BufferRef("workspace", 0), BufferRef("input", 1), BufferRef("output", 0))))
    return ScheduledTask(script_module(matmul_cpu_gemv_copy_a, matmul_cpu_gemv, name=name), launches,
                         (WorkspaceSpec("a_copy", "float32", (m, k)),), source="matmul.cpu_gemv",
                         params=dict(params))


class CpuPrepackedMatmul(Template):
    """``matmul_prepacked`` on the CPU: short-M register tiles over B panels packed at
    compile time."""

    name = "matmul.cpu_gemv"
    operator = PREPACKED_OPERATOR
    target = "cpu"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        (a, bp), (c,) = task.inputs, task.outputs
        panels_ok = bp.dtype.name == "float32" or (bp.dtype.name in OPERAND_DTYPES and "half_lanes" in attributes)
        return panels_ok and a.dtype.name in OPERAND_DTYPES and c.dtype.name in OPERAND_DTYPES

    def space(self, target: Any, level: int) -> list[dict]:
        from hidet_plugin_matmul.cpu_prepack import panel_width

        return gemv_space(target, level, panel_width(target))

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_cpu_gemv(attributes, params, target, operand_dtypes=task_operand_dtypes(task))
