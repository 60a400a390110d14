"""CUDA fp32 matmul with split-K on the SIMT cores: the `cuda_simt` kernel with K cut
into slices, one block per (tile, slice), partial sums in an fp32 workspace
[slices, batch, M, N] and a second launch that adds them and writes C (guarded
tensor-element stores: a graftable epilogue).

Why: with few rows (M of 16 to a few hundred) the plain SIMT grid has only
``ceil(M / BM) * ceil(N / BN)`` blocks (32 for 128 x 4096 with 128 x 128 tiles), a
quarter of the H200's 132 SMs; cutting K fills the machine while each block still
streams 16-deep tiles through shared memory. The space: the SIMT thread tiles with the
fewest rows per block (what short M needs), times split factors 2 to 16.

Level 2 also has the vector form (`cuda_simt_vec`, ``"vec": 1``: 16-byte operand loads,
cp.async B, float4 partials; 15 candidates, appended after the element ones so those
keep their places and sources). It ran on the H200 in session 9 (main aa29674, every
GPU test on odd, prime, batched and unaligned shapes passed against float64): at fp32
128x4096x4096 (graph replay) 8x8 tiles with BK 16 and split 8 took 101.4-102.7 us
against the element form's best, 112.4 us, and space-2 tuning picked a vector
candidate (0.92x cuBLAS, was 0.82x).

The cluster form (``"vec": 1, "cluster": 1``: the slices of a tile sum through
distributed shared memory, one launch, no workspace) stays opt-in
(HIDET_FRAMEWORK_SIMT_CLUSTER=1): it is correct on the H200 (its GPU tests passed) but
slower on every candidate measured there, 125.9-149.1 us at fp32 128x4096x4096 against
101.4 us for the vector form with its workspace and reduce launch (session 9; the
likely costs: the two cluster barriers, and 4- and 8-block clusters that must be
co-scheduled on one GPC).
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

from hidet_plugin_matmul.cuda_matmul_common import task_dtype
from hidet_plugin_matmul.cuda_simt import _legal, build_simt_module, simt_config, simt_split_plan
from hidet_plugin_matmul.cuda_simt_vec import vec_applies
from hidet_plugin_matmul.operators import MatmulOperands

CLUSTER_ENV = "HIDET_FRAMEWORK_SIMT_CLUSTER"  # "1": the cluster-reduce candidates join level 2 (measured slower)
MAX_CLUSTER = 8  # blocks of a portable thread-block cluster
MIN_K = 512  # below this a slice is too short to pay for the second launch
SPLITS = (2, 4, 8, 16)
DEFAULT = {"thread_m": 4, "thread_n": 8, "warps_m": 2, "warps_n": 2, "lanes_m": 4, "lanes_n": 8,
           "block_k": 16, "split_k": 4}


def splitk_space(target: Any, level: int) -> list[dict]:
    if level == 0:
        return [DEFAULT]
    out = [DEFAULT]
    tiles = []
    for tm, tn in ((4, 8), (4, 4), (8, 8), (8, 4)):
        for wm, wn in ((1, 4), (2, 2), (2, 4)):
            for bk in (8, 16):
                p = {"thread_m": tm, "thread_n": tn, "warps_m": wm, "warps_n": wn, "lanes_m": 4,
                     "lanes_n": 8, "block_k": bk}
                if _legal(p, target):
                    tiles.append(p)
    # short M first: the fewest rows per block, then the most work per thread
    tiles.sort(key=lambda p: (simt_config(p)["bm"], -p["thread_m"] * p["thread_n"], -p["block_k"]))
    if level == 1:  # the two busiest tiles of each block height (16 to 64 rows)
        by_rows: dict = {}
        for p in tiles:
            by_rows.setdefault(simt_config(p)["bm"], []).append(p)
        tiles = [p for group in by_rows.values() for p in group[:2]]
    for p in tiles:
        for split in SPLITS:
            q = dict(p, split_k=split)
            if q not in out:
                out.append(q)
    out += splitk_vec_candidates(target, level)  # level 2 only
    if os.environ.get(CLUSTER_ENV) == "1":
        out += splitk_cluster_candidates(target, level)
    return out[:30] if level == 1 else out


def splitk_cluster_candidates(target: Any, level: int) -> list[dict]:
    """The vector form whose slices reduce through a thread-block cluster (sm_90): one
    launch, no workspace; the 8x8 tiles with 4 and 8 slices."""
    if level < 2 or _compute_major(target) < 9:
        return []
    return [dict(p, cluster=1) for p in splitk_vec_candidates(target, level)
            if p["thread_m"] == 8 and p["split_k"] <= MAX_CLUSTER]


def _compute_major(target: Any) -> int:
    """The target's compute capability major (9 for the offline H200 default)."""
    cc = target.get("compute_capability") if hasattr(target, "get") else None
    return int(cc[0]) if cc else 9


def splitk_vec_candidates(target: Any, level: int) -> list[dict]:
    """The vector form (`cuda_simt_vec`): the 8x8 thread tiles (the most FMAs per shared
    load) and the 4x8 ones, BK 8 and 16, split 4 to 16; level 1 (and 0) takes none."""
    if level < 2:
        return []
    out = []
    for tm, tn in ((8, 8), (4, 8)):
        for wm, wn in ((2, 2), (1, 4), (2, 4)):
            for bk in (8, 16):
                p = {"thread_m": tm, "thread_n": tn, "warps_m": wm, "warps_n": wn, "lanes_m": 4, "lanes_n": 8,
                     "block_k": bk, "vec": 1}
                if _legal(p, target):
                    out += [dict(p, split_k=split) for split in SPLITS[1:]]
    return out


class CudaSimtSplitKMatmul(Template):
    """fp32 SIMT matmul with split-K; see the module docstring."""

    name = "matmul.cuda_simt_splitk"
    operator = "matmul"
    target = "cuda"
    version = "1"
    priority = 0  # never the level-0 default: it pays only where the grid is small

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return task_dtype(task) == "float32" and int(attributes["k"]) >= MIN_K

    def space(self, target: Any, level: int) -> list[dict]:
        return splitk_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        from hidet_framework.lang.annotations import DTypeAnnotation
        from hidet_framework.ir.dtypes import data_type
        from hidet_plugin_matmul.cuda_tensor_core_kernel import build_split_reduce

        ops = MatmulOperands(attributes)
        p = dict(DEFAULT, **params)
        _, splits = simt_split_plan(ops.k, p["block_k"], p["split_k"])
        vec = vec_applies(ops, p, attributes)
        cluster = vec and bool(p.get("cluster")) and 1 < splits <= MAX_CLUSTER
        name = (f"matmul_simt_sk_{ops.key()}_t{p['thread_m']}x{p['thread_n']}_w{p['warps_m']}x{p['warps_n']}"
                f"_l{p['lanes_m']}x{p['lanes_n']}_k{p['block_k']}_s{splits}{'_v' if vec else ''}{'c' if cluster else ''}")
        a, b, c = BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)
        if cluster:  # one launch: the cluster sums the slices and writes C
            module = build_simt_module(ops, p, name, split=p["split_k"], vec=True, cluster=True)
            return ScheduledTask(module, (Launch(name, (a, b, c)),), (), source=self.name, params=p)
        if splits == 1:
            module = build_simt_module(ops, p, name, split=1, vec=vec)
            return ScheduledTask(module, (Launch(name, (a, b, c)),), (), source=self.name, params=p)
        reduce = build_split_reduce(ops, DTypeAnnotation(data_type("float32")), splits, name + "_reduce")
        module = build_simt_module(ops, p, name, split=p["split_k"], extra=(reduce,), vec=vec)
        ws = BufferRef("workspace", 0)
        workspace = (WorkspaceSpec("matmul_split_k_partials", "float32", (splits, ops.batch, ops.m, ops.n)),)
        launches = (Launch(name, (a, b, ws)), Launch(name + "_reduce", (ws, c)))
        return ScheduledTask(module, launches, workspace, source=self.name, params=p)
