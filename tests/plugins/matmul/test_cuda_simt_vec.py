"""The vector form of the SIMT kernel (`cuda_simt_vec`): the ``vec: 1`` candidates of
`matmul.cuda_simt_splitk` (float4 A loads, cp.async B, float4 split-K partials), in the
level-2 space since they ran on the H200 (session 9), and its cluster form
(``cluster: 1``: the slices of a tile sum through distributed shared memory in one
launch), opt-in by HIDET_FRAMEWORK_SIMT_CLUSTER=1 (correct on the H200, but slower).

- host: the vector candidates are in level 2 with no variable set, after the element
  ones; the cluster ones join only under the variable (levels 0 and 1 unchanged, within
  200); the form applies only where K and N are multiples of 4 and the kernel is
  not a fusion anchor, and otherwise builds the element form byte for byte; the chunk
  mappings cover every element of the A and B tiles exactly once, and the cluster
  ranks' shares every chunk of the C tile exactly once; the DSMEM load primitive;
- compile-only: `test_cuda_short_m.py`'s every-candidate check compiles them;
- GPU (marker ``cuda``): odd and prime M, N and K multiples of 4 but not of the tiles,
  K tails in a slice, batched and broadcast operands, one slice (split 1), and an
  unaligned shape (the element form), against float64 numpy with NaN-poisoned outputs;
  the cluster form on the same shapes (sm_90), in a test of its own.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hidet_plugin_matmul.cuda_simt import simt_config
from hidet_plugin_matmul.cuda_simt_vec import VecStage, cluster_share, vec_applies
from hidet_plugin_matmul.cuda_splitk import (
    CLUSTER_ENV, CudaSimtSplitKMatmul, splitk_cluster_candidates, splitk_space, splitk_vec_candidates,
)
from hidet_plugin_matmul.operators import MatmulOperands, matmul_task


def _target():
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def _source(a_shape, b_shape, params, anchor=False):
    from hidet_framework.fusion.plan import ANCHOR_ATTRIBUTE
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda import CudaBackend

    task, attrs = matmul_task(a_shape, b_shape, "float32")
    if anchor:
        attrs = {**attrs, ANCHOR_ATTRIBUTE: True}
    st = CudaSimtSplitKMatmul().build(task, attrs, params, _target())
    return generate_source(st, CudaBackend(), _target()), st


VEC = splitk_vec_candidates(_target(), 2)
CLUSTER = splitk_cluster_candidates(_target(), 2)


def test_vec_candidates_are_in_level_2_and_cluster_ones_opt_in(monkeypatch):
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    s0, s1, s2 = (splitk_space(_target(), level) for level in (0, 1, 2))
    assert not any(p.get("vec") for p in s0 + s1)
    assert not any(p.get("cluster") for p in s2)
    plain = [p for p in s2 if not p.get("vec")]  # the element form first, in its own order
    assert s2 == plain + VEC and VEC and len(s2) <= 200
    assert len({tuple(sorted(p.items())) for p in s2}) == len(s2)
    print(f"\nsplit-K space sizes: level 0 {len(s0)}, level 1 {len(s1)}, level 2 {len(s2)} "
          f"({len(plain)} element + {len(VEC)} vector)")
    # the 8x8 tile of the session-7 winner (64 x 128, BK 8 and 16) is among them
    assert {(p["block_k"], p["split_k"]) for p in VEC if (p["thread_m"], p["warps_m"], p["warps_n"]) == (8, 2, 2)} \
        >= {(8, 8), (16, 8)}
    monkeypatch.setenv(CLUSTER_ENV, "1")
    s2c = splitk_space(_target(), 2)
    assert s2c == s2 + CLUSTER and len(s2c) <= 200 and CLUSTER
    assert [splitk_space(_target(), level) for level in (0, 1)] == [s0, s1]
    print(f"with {CLUSTER_ENV}=1: level 2 {len(s2c)} ({len(CLUSTER)} cluster)")
    for value in ("0", ""):  # only "1" turns it on
        monkeypatch.setenv(CLUSTER_ENV, value)
        assert splitk_space(_target(), 2) == s2
    assert all(p["cluster"] and p["vec"] and 2 <= p["split_k"] <= 8 for p in CLUSTER)
    from hidet_framework.backend.contract import Target

    ampere = Target("cuda", "sm_80", dict(_target().properties, compute_capability=(8, 0)))
    assert splitk_cluster_candidates(ampere, 2) == [] and splitk_cluster_candidates(_target(), 1) == []


def test_vec_form_only_on_aligned_rows_and_never_as_an_anchor():
    p = dict(VEC[0], split_k=4)
    plain = {k: v for k, v in p.items() if k != "vec"}
    src, st = _source((37, 1028), (1028, 44), p)
    assert "cp.async.cg" in src and "float4" in src and st.launches[0].function.endswith("_v")
    assert len(st.launches) == 2  # split-K: the partials and the reduce
    for a, b, anchor in [((37, 1030), (1030, 44), False), ((37, 1028), (1028, 42), False),
                         ((37, 1028), (1028, 44), True)]:
        src, st = _source(a, b, p, anchor)
        assert "cp.async" not in src and "float4*" not in src
        assert src == _source(a, b, plain, anchor)[0]  # the element form, byte for byte
        task, attrs = matmul_task(a, b, "float32")
        assert not vec_applies(MatmulOperands(attrs), p, {**attrs, "fusion.anchor": anchor})


@pytest.mark.parametrize("params", VEC, ids=lambda p: "t{thread_m}x{thread_n}w{warps_m}x{warps_n}k{block_k}s{split_k}"
                         .format(**p))
def test_chunk_mappings_cover_each_tile_element_once(params):
    cfg = simt_config(params)
    bm, bn, bk, threads = cfg["bm"], cfg["bn"], cfg["bk"], cfg["threads"]
    task, attrs = matmul_task((bm, 4096), (4096, bn), "float32")
    vs = VecStage(MatmulOperands(attrs), bm, bn, bk, threads, lambda e: e, (False, False, False))
    a_seen, b_seen = [], []
    for tid in range(threads):
        ai, akc, bk0, bjc = (int(x) for x in vs.origins(tid))
        a_seen += [(ai + i, (akc + q) * 4 + e) for i, q in vs.a_tasks for e in range(4)]
        b_seen += [(bk0 + q, (bjc + j) * 4 + e) for q, j in vs.b_tasks for e in range(4)]
    assert sorted(a_seen) == [(i, k) for i in range(bm) for k in range(bk)]
    assert sorted(b_seen) == [(k, j) for k in range(bk) for j in range(bn)]
    assert len(vs.a_tasks) == cfg["a_chunks"] and len(vs.b_tasks) == cfg["b_chunks"]


def test_cluster_form_is_one_launch_without_workspace():
    p = dict(CLUSTER[-1], split_k=8)
    src, st = _source((37, 1028), (1028, 44), p)
    assert len(st.launches) == 1 and not st.workspace and st.launches[0].function.endswith("_vc")
    assert "__cluster_dims__(8, 1, 1)" in src and "ld.shared::cluster.v4.f32" in src and "mapa.shared::cluster" in src
    assert src.count("barrier.cluster.arrive") == 2
    src, st = _source((37, 1028), (1028, 42), p)  # unaligned N: the element form, workspace and reduce
    assert len(st.launches) == 2 and "cluster" not in src
    src, st = _source((37, 1028), (1028, 44), dict(p, split_k=1))  # one slice: no cluster
    assert len(st.launches) == 1 and "__cluster_dims__" not in src and "cp.async.cg" in src


@pytest.mark.parametrize("splits", range(2, 9))
def test_cluster_shares_cover_each_chunk_once(splits):
    for bm, bn, threads in [(64, 128, 128), (32, 256, 128), (64, 256, 256)]:
        chunks, per_rank, steps = cluster_share(bm, bn, threads, splits)
        seen = [r * per_rank + t * threads + tid for r in range(splits) for tid in range(threads)
                for t in range(steps) if t * threads + tid < per_rank and r * per_rank + t * threads + tid < chunks]
        assert sorted(seen) == list(range(chunks)) and chunks == bm * bn // 4


def test_dsmem_load_primitive_takes_four_f32_registers():
    from hidet_framework.ir.dtypes import float32, int32
    from hidet_framework.ir.expr import var
    from hidet_framework.ir.types import PointerType
    from hidet_plugin_cuda.hopper import ld_shared_cluster_v4_f32

    ptr = var("smem", PointerType(float32))
    stmt = ld_shared_cluster_v4_f32([var(f"r{e}", float32) for e in range(4)], ptr, 3)
    assert "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}" in stmt.template and len(stmt.outputs) == 4
    assert all(c == "=f" for c, _ in stmt.outputs)
    with pytest.raises(ValueError):
        ld_shared_cluster_v4_f32([var(f"r{e}", float32) for e in range(3)], ptr, 0)
    with pytest.raises(TypeError):
        ld_shared_cluster_v4_f32([var(f"r{e}", int32) for e in range(4)], ptr, 0)


EMULATED = [  # (A, B, candidate): guards, batches, one row, slices, the cluster reduce, and the element form
    ((13, 1032), (1032, 68), dict(VEC[1], split_k=8)),
    ((2, 37, 1028), (1, 1028, 44), dict(VEC[0], split_k=16)),
    ((1, 516), (516, 4), dict(VEC[1], split_k=1)),
    ((13, 1032), (1032, 68), dict(CLUSTER[1])),
    ((2, 37, 1028), (1, 1028, 44), dict(CLUSTER[0], split_k=4)),
    ((13, 1031), (1031, 67), dict(CLUSTER[1])),  # unaligned: the element form with its reduce
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ for the CPU emulation")
@pytest.mark.parametrize("a_shape, b_shape, params", EMULATED, ids=lambda x: str(x) if isinstance(x, tuple) else None)
def test_vec_and_cluster_kernels_in_a_cpu_emulation(tmp_path, a_shape, b_shape, params):
    """The generated CUDA run on the CPU (simt_emulation: threads, barriers, copies)
    against float64 numpy, outputs NaN first."""
    from .simt_emulation import emulate

    rng = np.random.default_rng()
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    task, attrs = matmul_task(a_shape, b_shape, "float32")
    st = CudaSimtSplitKMatmul().build(task, attrs, params, _target())
    got = emulate(st, _target(), a, b, tuple(task.outputs[0].shape), str(tmp_path)).astype(np.float64)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert not np.isnan(got).any()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5


# --------------------------------------------------------------------------- GPU
VEC_SHAPES = [
    ((13, 1032), (1032, 68)),            # prime M, N past one 128-column tile, K tail in a slice
    ((128, 2048), (2048, 256)),          # every tile whole: no guard emitted
    ((2, 37, 1028), (1, 1028, 44)),      # batched A, B broadcast over the batch, prime M
    ((1, 516), (516, 4)),                # one row, one 16-byte chunk of columns
    ((61, 4096), (4096, 132)),           # prime M, long K, N one chunk past a tile
    ((13, 1031), (1031, 67)),            # unaligned K and N: the element form
]




def _cases(candidates: list, every: tuple, step: int) -> list:
    """(shapes, params) pairs, one build each (so xdist spreads the builds): every
    candidate on the shapes in `every`, every `step`-th on the others."""
    return [(shapes, p) for shapes in VEC_SHAPES
            for p in (candidates if shapes[0] in every else candidates[::step])]


VEC_CASES = _cases(VEC, ((13, 1032),), 4) + [(s, dict(VEC[0], split_k=1)) for s in VEC_SHAPES]  # + one slice
CLUSTER_CASES = _cases(CLUSTER, ((13, 1032), (2, 37, 1028)), 3)


@pytest.mark.cuda
@pytest.mark.parametrize("shapes, params", VEC_CASES)
def test_vec_candidates_match_float64_reference(cuda_env, matmul_error, shapes, params):
    err = matmul_error(cuda_env, CudaSimtSplitKMatmul(), params, *shapes, "float32", np.random.default_rng())
    assert err < 1e-5, (params, err)


@pytest.mark.cuda
@pytest.mark.parametrize("shapes, params", CLUSTER_CASES)
def test_cluster_candidates_match_float64_reference(hopper, matmul_error, shapes, params):
    err = matmul_error(hopper, CudaSimtSplitKMatmul(), params, *shapes, "float32", np.random.default_rng())
    assert err < 1e-5, (params, err)
