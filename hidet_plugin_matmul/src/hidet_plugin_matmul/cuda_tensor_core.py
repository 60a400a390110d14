"""CUDA fp16 / bf16 matmul on the tensor cores (mma.sync m16n8k16, fp32 accumulation).

The kernel is in `cuda_tensor_core_kernel`; this module holds the template: its space,
derived from the target only (shared memory per block decides the deepest pipeline a
tile allows, registers per thread which warp tiles fit), and `build`, which adds the
split-K workspace and reduce launch when the candidate asks for it.

Space (block tile, warps, BK, stages, split-K):
- block tiles 64x64 .. 256x128 with 4 or 8 warps, warp tiles 32x32 .. 64x64;
- BK 32 or 64 (an even number of 16-deep k-steps, for the fragment double buffer);
- stages 2..5 while ``stages * (BM*BK + BK*BN) * 2`` fits ``smem_per_block_optin``;
- split-K 2 and 4 on the smaller tiles (for small M*N with a long K);
- v2: a few ``pad`` candidates, which copy unaligned operands into padded buffers
  first and run cp.async on them (see the kernel module); the others keep v1's
  register-staged loads on unaligned rows. (Measured slower than register staging on
  2039^3 and 1021x3001x997, so they are extra candidates, not the default.)
- v3: no guard that the static shape makes always true; a few ``raster`` candidates
  that number blocks in groups of M tiles for L2 reuse (`block_tile`).
- v4: level 2 also has tiles of one or two warps (64x32, 32x64, 32x32) and split-K
  with BK 64, for short M (M = 16..256: more blocks on a small output).
- Default (first at every level): ``{"auto": 1}``, the level-2 candidate with the least
  modelled time on the target for the task's shape (`cuda_defaults`).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

from hidet_framework.ir.dtypes import data_type
from hidet_framework.lang.annotations import DTypeAnnotation

from hidet_plugin_matmul.cuda_defaults import (AUTO, Gemm, Gpu, Kernel, choose, is_auto, modelled_seconds,
                                               resolve,
                                               tile_efficiency)
from hidet_plugin_matmul.cuda_matmul_common import target_int, task_dtype
from hidet_plugin_matmul.cuda_pad_operands import padded_shapes
from hidet_plugin_matmul.cuda_stage_operands import build_stage_kernel, prologue_inputs
from hidet_plugin_matmul.cuda_tensor_core_kernel import build_tc_module, staging, tc_config
from hidet_plugin_matmul.operators import MatmulOperands

# (block_m, block_n, warps_m, warps_n), most generally useful first
BLOCK_TILES = [
    (128, 128, 2, 4), (128, 256, 2, 4), (256, 128, 4, 2), (128, 128, 2, 2), (128, 128, 4, 2),
    (64, 128, 2, 2), (128, 64, 2, 2), (64, 256, 1, 4), (64, 64, 2, 2),
]
# v2 candidates that pad unaligned operands first (then cp.async): (tile, BK, stages);
# on aligned shapes they build the same kernel as the plain candidate
PAD_STAGE = [((128, 128, 2, 4), 32, 3), ((128, 128, 2, 4), 64, 3), ((64, 128, 2, 2), 32, 4),
             ((256, 128, 4, 2), 64, 4)]
# v3: candidates that number blocks in column groups of RASTER M tiles (see block_tile)
RASTER = 8
SPLIT_TILES = [(128, 128, 2, 4), (128, 128, 2, 2), (64, 128, 2, 2), (64, 64, 2, 2)]
# v4 (level 2 only): tiles of 1 or 2 warps, for short M (more blocks on a small output)
SMALL_TILES = [(64, 32, 2, 1), (32, 64, 1, 2), (32, 32, 1, 1)]
DEFAULT = {"block_m": 128, "block_n": 128, "block_k": 32, "warps_m": 2, "warps_n": 4, "stages": 3, "split_k": 1}
MMA_SYNC_RATE = 0.68  # of the SM's tensor peak, at a saturating warp tile (mma.sync's best: ~0.8 of wgmma's)


def _params(tile: tuple, bk: int, stages: int, split: int = 1) -> dict:
    bm, bn, wm, wn = tile
    return {"block_m": bm, "block_n": bn, "block_k": bk, "warps_m": wm, "warps_n": wn, "stages": stages,
            "split_k": split}


def tc_legal(params: Mapping[str, Any], target: Any) -> bool:
    cfg = tc_config(params)
    if cfg["smem"] > target_int(target, "smem_per_block_optin", 227 * 1024):
        return False
    if cfg["wtm"] % 16 or cfg["wtn"] % 16 or cfg["ks"] % 2:
        return False
    return tc_registers(cfg) <= min(255, target_int(target, "regs_per_block", 65536) // cfg["threads"])


def tc_registers(cfg: Mapping[str, Any]) -> int:
    """Accumulators + two fragment buffers + ~60 for addresses and offsets."""
    return cfg["mt"] * cfg["nt"] * 4 + 2 * (cfg["mt"] * 4 + cfg["nt"] * 2) + 60


def tc_kernel(params: Mapping[str, Any], path: str, elem: int = 2, extra_launches: int = 0,
              extra_bytes: int = 0) -> Kernel:
    """A candidate as the cost model sees it; `path`: its staging ("cp", "reg", "pad");
    the extra launches and bytes: what the caller runs around it (a layout copy)."""
    cfg = tc_config(params)
    if path == "pad":
        extra_launches += 1
    return Kernel(cfg["bm"], cfg["bn"], cfg["bk"], cfg["threads"], cfg["smem"], tc_registers(cfg),
                  cfg["stages"] if path != "reg" else 2, cfg["split"],
                  MMA_SYNC_RATE * tile_efficiency(cfg["wtm"], cfg["wtn"], 8), register_staged=path == "reg",
                  extra_launches=extra_launches, extra_bytes=extra_bytes)


def tc_auto(ops: MatmulOperands, elem: int, target: Any, staged: tuple = ()) -> tuple[dict, float]:
    """The default's parameters for this shape and their modelled seconds; `staged`: the
    operands a fusion anchor copies first (`cuda_stage_operands`) on the cp.async path."""
    def describe(p: Mapping[str, Any]) -> Kernel | None:
        # `pad` candidates are left to the tuner: measured 20-25% slower than register
        # staging on both odd shapes of docs/perf_notes.md (v2), for reasons the model
        # does not see (the padded rows' pitch), so the model must not pick them
        if is_auto(p) or p.get("pad"):
            return None
        return tc_kernel(p, staging(ops, p), elem, *_stage_cost(ops, staging(ops, p), staged, elem))

    return choose(tc_space(target, 2), describe, Gemm(ops.m, ops.n, ops.k, ops.batch, elem), target)


def _stage_cost(ops: MatmulOperands, path: str, staged: tuple, elem: int) -> tuple[int, int]:
    """(extra launches, bytes moved) of the staging launch, when there is one."""
    if path != "cp" or not staged:
        return 0, 0
    sizes = {0: ops.a_shape, 1: ops.b_shape}
    moved = sum(2 * elem * _count(sizes[i]) for i in staged)
    return 1, moved


def _count(shape: tuple) -> int:
    out = 1
    for x in shape:
        out *= int(x)
    return out


def tc_space(target: Any, level: int) -> list[dict]:
    if level == 0:
        return [dict(AUTO)]
    out = [dict(AUTO), DEFAULT]

    def add(p: dict) -> None:
        if p not in out and tc_legal(p, target):
            out.append(p)

    if level == 1:
        for stages in (3, 4):  # (the default took the place of 64x64 with 4 stages)
            for tile in BLOCK_TILES if stages == 3 else BLOCK_TILES[:-1]:
                add(_params(tile, 32, stages))
        for tile in BLOCK_TILES[:4]:
            add(_params(tile, 64, 3))
        for tile in BLOCK_TILES[:3]:  # v2's best at 4096^3 is 256x128x64 with 4 stages
            add(_params(tile, 64, 4))
        for tile, split in ((SPLIT_TILES[1], 2), (SPLIT_TILES[1], 4), (SPLIT_TILES[2], 2)):
            add(_params(tile, 32, 3, split))
        for tile, bk, stages in PAD_STAGE[:1]:
            add(dict(_params(tile, bk, stages), pad=1))
        add(dict(_params(BLOCK_TILES[2], 64, 4), raster=RASTER))  # v3: L2-friendly block order
        return out
    for tile in BLOCK_TILES:
        for bk in (32, 64):
            for stages in (2, 3, 4, 5):
                add(_params(tile, bk, stages))
    for tile in SPLIT_TILES:
        for split in (2, 4):
            for stages in (3, 4):
                add(_params(tile, 32, stages, split))
    for tile, bk, stages in PAD_STAGE:
        add(dict(_params(tile, bk, stages), pad=1))
    for tile in BLOCK_TILES[:3]:
        for bk, stages in ((32, 4), (64, 3), (64, 4)):
            add(dict(_params(tile, bk, stages), raster=RASTER))
    for tile in SMALL_TILES:  # v4: appended, so the earlier candidates keep their places
        for bk, stages in ((32, 5), (64, 4), (64, 5)):
            add(_params(tile, bk, stages))
    for tile in SPLIT_TILES[3:] + SMALL_TILES:
        for split in (2, 4):
            add(_params(tile, 64, 4, split))
    return out


class CudaTensorCoreMatmul(Template):
    """fp16/bf16 matmul with mma.sync; see the module docstring."""

    name = "matmul.cuda_tensor_core"
    operator = "matmul"
    target = "cuda"
    version = "3"
    priority = 2

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return task_dtype(task) in ("float16", "bfloat16")

    def space(self, target: Any, level: int) -> list[dict]:
        return tc_space(target, level)

    def estimate(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> float:
        """Modelled seconds of `params` (the default: of the candidate it resolves to)."""
        ops, elem = MatmulOperands(attributes), data_type(task_dtype(task)).nbytes
        staged = prologue_inputs(attributes)
        if params == AUTO:
            return tc_auto(ops, elem, target, staged)[1]
        p = dict(DEFAULT, **resolve(params, lambda: tc_auto(ops, elem, target, staged)[0]))
        path = staging(ops, p)
        return modelled_seconds(Gemm(ops.m, ops.n, ops.k, ops.batch, elem),
                                tc_kernel(p, path, elem, *_stage_cost(ops, path, staged, elem)), Gpu.from_target(target))

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        ops = MatmulOperands(attributes)
        dtype = task_dtype(task)
        params = resolve(params, lambda: tc_auto(ops, data_type(dtype).nbytes, target, prologue_inputs(attributes))[0])
        p = dict(DEFAULT, **params)
        path = staging(ops, p)
        name = (f"matmul_tc_{dtype}_{ops.key()}_{p['block_m']}x{p['block_n']}x{p['block_k']}"
                f"_w{p['warps_m']}x{p['warps_n']}_s{p['stages']}_sk{p['split_k']}_{path}"
                f"{'_r%d' % p['raster'] if p.get('raster') else ''}")
        module = build_tc_module(ops, dtype, p, name)
        a, b, c = BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)
        launches: list = []
        workspace: list = []
        staged = prologue_inputs(attributes) if path == "cp" else ()
        if staged:  # a fusion anchor whose cp.async operands take prologues: copy them first
            stage = build_stage_kernel(ops, DTypeAnnotation(data_type(dtype)), name + "_stage", 0 in staged, 1 in staged)
            module = module.with_functions({stage.ir.name: stage.ir, **module.functions})
            sa, sb = a, b
            if 0 in staged:
                sa = BufferRef("workspace", len(workspace))
                workspace.append(WorkspaceSpec("matmul_staged_a", dtype, ops.a_shape))
            if 1 in staged:
                sb = BufferRef("workspace", len(workspace))
                workspace.append(WorkspaceSpec("matmul_staged_b", dtype, ops.b_shape))
            launches.append(Launch(name + "_stage", (a, b, sa, sb)))
            a, b = sa, sb
        if path == "pad":
            ap_shape, bp_shape = padded_shapes(ops)
            pa = a
            if ops.k % 8:
                pa = BufferRef("workspace", len(workspace))
                workspace.append(WorkspaceSpec("matmul_padded_a", dtype, ap_shape))
            pb = BufferRef("workspace", len(workspace))
            workspace.append(WorkspaceSpec("matmul_padded_b", dtype, bp_shape))
            launches.append(Launch(name + "_pad", (a, b, pa, pb)))
            a, b = pa, pb
        if p["split_k"] == 1:
            launches.append(Launch(name, (a, b, c)))
        else:
            ws = BufferRef("workspace", len(workspace))
            workspace.append(WorkspaceSpec("matmul_split_k_partials", "float32",
                                           (p["split_k"], ops.batch, ops.m, ops.n)))
            launches += [Launch(name, (a, b, ws)), Launch(name + "_reduce", (ws, c))]
        return ScheduledTask(module, tuple(launches), tuple(workspace), source=self.name, params=p)
