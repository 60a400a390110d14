"""The CUDA matmul templates (SIMT fp32, tensor-core fp16/bf16).

- compile-only (marker ``nvcc``, runs in CI without a GPU): every space-2 candidate of
  the templates generates CUDA that compiles to an sm_90 (wgmma: sm_90a) cubin (the bf16 odd-shape
  build, i.e. the register-staged path plus one pad candidate, at space 1 to keep CI
  time), in parallel on 2 processes through a fresh build cache; the time is printed.
- GPU (marker ``cuda``): candidates run on shapes with primes and 1, batched operands
  included, against a float64 numpy reference, outputs poisoned first.
"""
from __future__ import annotations

import re

import time

import numpy as np
import pytest

from hidet_plugin_matmul.cuda_simt import CudaSimtMatmul
from hidet_plugin_matmul.cuda_tensor_core import CudaTensorCoreMatmul
from hidet_plugin_matmul.operators import matmul_task


def _target():
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def _nvrtc_or_skip():
    try:
        from hidet_plugin_cuda.nvrtc_build import choose_compiler

        choose_compiler()
    except Exception as exc:
        pytest.skip(f"no CUDA compiler: {exc}")


# ------------------------------------------------------------------- spaces
def test_spaces_are_bounded_hardware_only_and_default_first():
    target = _target()
    for template in (CudaSimtMatmul(), CudaTensorCoreMatmul()):
        s0, s1, s2 = (template.space(target, level) for level in (0, 1, 2))
        assert len(s0) == 1 and 1 < len(s1) <= 30 and len(s1) <= len(s2) <= 200
        assert s1[0] == s0[0] == s2[0]
        assert len({tuple(sorted(p.items())) for p in s2}) == len(s2)


def test_tensor_core_stages_follow_shared_memory():
    from hidet_framework.backend.contract import Target
    from hidet_plugin_matmul.cuda_tensor_core_kernel import tc_config

    small = Target("cuda", "sm_90", dict(_target().properties, smem_per_block_optin=64 * 1024))
    for p in CudaTensorCoreMatmul().space(small, 2)[1:]:
        assert tc_config(p)["smem"] <= 64 * 1024
    assert max(p.get("stages", 0) for p in CudaTensorCoreMatmul().space(_target(), 2)) == 5


def test_templates_apply_by_dtype():
    task32, attrs32 = matmul_task((4, 8), (8, 4), "float32")
    task16, attrs16 = matmul_task((4, 8), (8, 4), "float16")
    assert CudaSimtMatmul().applies(task32, attrs32) and not CudaSimtMatmul().applies(task16, attrs16)
    assert CudaTensorCoreMatmul().applies(task16, attrs16) and not CudaTensorCoreMatmul().applies(task32, attrs32)


# ------------------------------------------------------------- compile-only
def _all_jobs():
    target = _target()
    jobs = []
    # SIMT: a batched 3-D product with odd sizes (every guard is live)
    task, attrs = matmul_task((2, 37, 29), (1, 29, 43), "float32")
    jobs += [(CudaSimtMatmul(), task, attrs, p, target) for p in CudaSimtMatmul().space(target, 2)]
    # tensor cores: fp16 with aligned rows (the cp.async pipeline) ...
    task, attrs = matmul_task((192, 256), (256, 320), "float16")
    jobs += [(CudaTensorCoreMatmul(), task, attrs, p, target) for p in CudaTensorCoreMatmul().space(target, 2)]
    # ... and bf16 with odd K and N (the register-staged path; space 1 holds one pad candidate)
    task, attrs = matmul_task((61, 97), (97, 131), "bfloat16")
    jobs += [(CudaTensorCoreMatmul(), task, attrs, p, target) for p in CudaTensorCoreMatmul().space(target, 1)]
    # wgmma (sm_90a): fp16 on every space-2 candidate, bf16 with edges in M, N and K at space 1
    from hidet_plugin_matmul.cuda_wgmma import CudaWgmmaMatmul

    task, attrs = matmul_task((192, 256), (256, 320), "float16")
    jobs += [(CudaWgmmaMatmul(), task, attrs, p, target) for p in CudaWgmmaMatmul().space(target, 2)]
    task, attrs = matmul_task((61, 200), (200, 136), "bfloat16")
    jobs += [(CudaWgmmaMatmul(), task, attrs, p, target) for p in CudaWgmmaMatmul().space(target, 1)]
    return jobs


@pytest.mark.nvcc
def test_every_space2_candidate_compiles_to_sm90(tmp_path, monkeypatch):
    _nvrtc_or_skip()
    from hidet_framework.runtime.compiled_task import build_in_parallel
    from hidet_plugin_cuda import CudaBackend

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    jobs = _all_jobs()
    started = time.perf_counter()
    makers = [lambda job=job: job[0].build(job[1], job[2], job[3], job[4]) for job in jobs]
    results = build_in_parallel(makers, CudaBackend(), _target(), workers=2, skip_renamed=True)
    elapsed = time.perf_counter() - started
    failures = [(jobs[i][3], jobs[i][0].name, err) for i, path, err, _ in results if err]
    assert not failures, f"{len(failures)} of {len(jobs)} candidates failed; first: {failures[0]}"
    for _, path, _, _ in results:
        with open(path, "rb") as f:
            assert f.read(4) == b"\x7fELF"
    print(f"\ncompiled {len(jobs)} CUDA matmul candidates to sm_90 cubins in {elapsed:.1f} s on 2 processes")


@pytest.mark.nvcc
def test_generated_tensor_core_source_uses_the_instructions():
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda import CudaBackend

    def candidate_source(scheduled, target):
        return generate_source(scheduled, CudaBackend(), target)

    t = CudaTensorCoreMatmul()
    task, attrs = matmul_task((128, 64), (64, 128), "float16")
    source = candidate_source(t.build(task, attrs, t.space(_target(), 0)[0], _target()), _target())
    # the default is chosen by the cost model: an S-stage pipeline waits for all but S - 2 groups
    stages = int(re.search(r"matmul_tc_float16_\w*_s(\d+)_", source).group(1))
    for text in ("cp.async.cg.shared.global", f"cp.async.wait_group {stages - 2};",
                 "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                 "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "mma.sync.aligned.m16n8k16.row.col.f32.f16"):
        assert text in source, text


def test_unaligned_operands_are_padded_first():
    from hidet_plugin_matmul.cuda_tensor_core_kernel import staging

    t = CudaTensorCoreMatmul()
    space = t.space(_target(), 2)
    pad = next(p for p in t.space(_target(), 1) if p.get("pad"))
    # K and N odd: A and B padded (K, N up to multiples of 8), then the cp.async kernel
    task, attrs = matmul_task((1021, 997), (997, 3001), "float16")
    assert len(t.build(task, attrs, space[1], _target()).launches) == 1  # register-staged
    st = t.build(task, attrs, pad, _target())
    assert [w.shape for w in st.workspace] == [(1021, 1000), (1000, 3008)]
    assert [x.kind for x in st.launches[1].buffers] == ["workspace", "workspace", "output"]
    assert st.launches[0].function.endswith("_pad")
    # only N odd: B alone is padded, A read as it is; split-K partials come after
    task, attrs = matmul_task((2, 64, 96), (96, 13), "float16")
    split = dict(next(p for p in space if p.get("split_k", 1) > 1), pad=1)
    st = t.build(task, attrs, split, _target())
    assert [w.name for w in st.workspace] == ["matmul_padded_b", "matmul_split_k_partials"]
    assert st.launches[0].buffers[2] == st.launches[1].buffers[0] == st.launches[0].buffers[0]
    assert len(st.launches) == 3
    # aligned rows: no extra launch, pad or not; reg_stage: the register path on any shape
    task, attrs = matmul_task((64, 96), (96, 128), "float16")
    assert len(t.build(task, attrs, pad, _target()).launches) == 1
    assert staging(attrs_ops(attrs), pad) == "cp" and staging(attrs_ops(attrs), dict(pad, reg_stage=1)) == "reg"


def attrs_ops(attrs):
    from hidet_plugin_matmul.operators import MatmulOperands

    return MatmulOperands(attrs)


def test_simt_emits_no_guard_the_shape_makes_true():
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda import CudaBackend

    def candidate_source(scheduled, target):
        return generate_source(scheduled, CudaBackend(), target)

    t = CudaSimtMatmul()
    p = t.space(_target(), 0)[0]
    aligned = candidate_source(t.build(*matmul_task((256, 64), (64, 256), "float32"), p, _target()), _target())
    odd = candidate_source(t.build(*matmul_task((37, 29), (29, 43), "float32"), p, _target()), _target())
    assert "0.0f;" in odd.split("for (int kt")[1] and "0.0f;" not in aligned.split("for (int kt")[1]


# --------------------------------------------------------------------- GPU
SHAPES = [  # (a_shape, b_shape)
    ((1, 1), (1, 1)), ((7, 13), (13, 5)), ((127, 131), (131, 137)), ((256, 512), (512, 384)),
    ((61, 997), (997, 251)), ((3, 33, 17), (3, 17, 41)), ((4, 40, 64), (1, 64, 72)),
]


@pytest.mark.cuda
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_simt_matches_float64_reference(cuda_env, matmul_error, shapes):
    cuda_env[2].backends.cuda.matmul.allow_tf32 = False
    rng = np.random.default_rng()
    t = CudaSimtMatmul()
    for params in t.space(cuda_env[1], 1)[:4]:
        assert matmul_error(cuda_env, t, params, *shapes, "float32", rng) < 1e-5


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_tensor_core_matches_float64_reference(cuda_env, matmul_error, shapes, dtype):
    rng = np.random.default_rng()
    t = CudaTensorCoreMatmul()
    space = t.space(cuda_env[1], 2)
    fixed = space[1:]  # space[0] is {"auto": 1}, the cost model's pick for the shape
    picks = [space[0]] + [p for p in fixed if p["split_k"] > 1][:2] + [p for p in fixed if p["stages"] in (2, 5)][:2]
    picks += [p for p in fixed if p["block_k"] == 64][:1] + [p for p in fixed if p["block_m"] == 256][:1]
    picks += [p for p in space if p.get("pad")][:1]
    for params in picks:
        err = matmul_error(cuda_env, t, params, *shapes, dtype, rng)
        assert err < 1e-2, (params, err)


@pytest.mark.parametrize("grid_n, grid_m, group", [(32, 16, 8), (5, 11, 8), (3, 9, 4), (7, 3, 8), (1, 17, 8)])
def test_raster_block_order_visits_every_tile_once(grid_n, grid_m, group):
    from hidet_plugin_matmul.cuda_ir_builders import block_tile

    tiles = [block_tile(bx, by, grid_n, grid_m, group) for by in range(grid_m) for bx in range(grid_n)]
    assert sorted(tiles) == [(i, j) for i in range(grid_m) for j in range(grid_n)]
    if grid_m > group:  # the first blocks walk down a column group, not along a row
        assert tiles[1] == (1, 0)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensor_core_raster_candidates_match_float64_reference(cuda_env, matmul_error, dtype):
    # 11 M tiles of 128 (a last group of 3 rows under group 8), 2-3 N tiles, an odd K
    rng = np.random.default_rng()
    t = CudaTensorCoreMatmul()
    picks = [p for p in t.space(cuda_env[1], 2) if p.get("raster")]
    assert picks
    for params in picks:
        for shapes in (((1300, 72), (72, 300)), ((1408, 61), (61, 257))):
            err = matmul_error(cuda_env, t, params, *shapes, dtype, rng)
            assert err < 1e-2, (params, shapes, err)
