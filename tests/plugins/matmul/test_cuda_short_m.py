"""The short-M CUDA matmul templates: the GEMV-shaped kernel (`cuda_gemv`, fp32 M <= 32,
fp16 / bf16 M <= 8; its kernel is checked on larger M too), SIMT split-K (`cuda_simt_splitk`, fp32) and swapped-role wgmma with
split-K (`cuda_hopper_skinny`, fp16 / bf16, M of 9 to 256, sm_90a).

- host checks: spaces bounded, from the target only, default first; where the templates
  apply; the launches and workspace a split candidate needs; the element-read form for
  the anchor of a fusion group;
- compile-only (marker ``nvcc``): every space-2 candidate compiles to an sm_90 cubin;
- GPU (marker ``cuda``): odd and prime shapes (M of 1 to 8, 13, 31; prime K and N),
  batched and broadcast operands, against float64 numpy with NaN-poisoned outputs.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from hidet_plugin_matmul.cuda_gemv import DEFAULT as GEMV_DEFAULT, CudaGemvMatmul, gemv_config
from hidet_plugin_matmul.cuda_hopper_skinny import CudaHopperSkinnyMatmul
from hidet_plugin_matmul.cuda_splitk import CudaSimtSplitKMatmul, splitk_cluster_candidates, splitk_vec_candidates
from hidet_plugin_matmul.operators import MatmulOperands, matmul_task

TOL = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}


def _target():
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def _gemv(**kw):
    return dict(GEMV_DEFAULT, **kw)


# ------------------------------------------------------------------- host checks
@pytest.mark.parametrize("template", [CudaGemvMatmul(), CudaSimtSplitKMatmul(), CudaHopperSkinnyMatmul()],
                         ids=lambda t: t.name)
def test_spaces_are_bounded_and_default_first(template):
    s0, s1, s2 = (template.space(_target(), level) for level in (0, 1, 2))
    assert len(s0) == 1 and 1 < len(s1) <= 30 and len(s1) <= len(s2) <= 200
    assert s0[0] == s1[0] == s2[0]
    assert len({tuple(sorted(p.items())) for p in s2}) == len(s2)
    assert all(p in s2 for p in s1)


def test_gemv_space_follows_shared_memory_and_threads():
    from hidet_framework.backend.contract import Target

    small = Target("cuda", "sm_90", dict(_target().properties, smem_per_block=16 * 1024,
                                         max_threads_per_block=128))
    space = CudaGemvMatmul().space(small, 2)
    assert all(gemv_config(p)["smem"] <= 16 * 1024 for p in space[1:])
    assert all(gemv_config(p)["threads"] <= 128 for p in space[1:])
    assert len(space) < len(CudaGemvMatmul().space(_target(), 2))


def test_where_the_short_m_templates_apply():
    g, s = CudaGemvMatmul(), CudaSimtSplitKMatmul()
    assert g.applies(*matmul_task((32, 64), (64, 8), "float32"))
    assert not g.applies(*matmul_task((33, 64), (64, 8), "float32"))
    for dtype in ("float16", "bfloat16"):  # 9 rows and more: the tensor cores (cuda_hopper_skinny)
        assert g.applies(*matmul_task((8, 64), (64, 8), dtype))
        assert not g.applies(*matmul_task((9, 64), (64, 8), dtype))
    assert not g.applies(*matmul_task((1, 64), (64, 8), "int32"))
    assert s.applies(*matmul_task((128, 4096), (4096, 64), "float32"))
    assert not s.applies(*matmul_task((128, 4096), (4096, 64), "float16"))
    assert not s.applies(*matmul_task((128, 511), (511, 64), "float32"))


def test_skinny_wgmma_applies_to_aligned_short_m_and_refuses_the_rest():
    from hidet_framework.backend.contract import Target

    t = CudaHopperSkinnyMatmul()
    assert t.applies(*matmul_task((9, 64), (64, 8), "float16"))
    assert t.applies(*matmul_task((256, 64), (64, 8), "bfloat16"))
    for a, b, dtype in [((8, 64), (64, 8), "float16"), ((257, 64), (64, 8), "float16"),
                        ((16, 61), (61, 8), "float16"), ((16, 64), (64, 12), "float16"),
                        ((16, 64), (64, 8), "float32")]:
        task, attrs = matmul_task(a, b, dtype)
        assert not t.applies(task, attrs)
        with pytest.raises(ValueError):
            t.build(task, attrs, t.space(_target(), 0)[0], _target())
    ampere = Target("cuda", "sm_80", dict(_target().properties))
    assert t.space(ampere, 2) == []


def test_split_candidates_add_a_workspace_and_a_reduce_launch():
    task, attrs = matmul_task((3, 1000), (1000, 520), "bfloat16")
    one = CudaGemvMatmul().build(task, attrs, _gemv(split=1), _target())
    assert len(one.launches) == 1 and not one.workspace
    st = CudaGemvMatmul().build(task, attrs, _gemv(split=16), _target())
    splits = gemv_config(_gemv(split=16), MatmulOperands(attrs))["splits"]
    assert 1 < splits <= 16 and [w.shape for w in st.workspace] == [(splits, 1, 3, 520)]
    assert [x.kind for x in st.launches[0].buffers] == ["input", "input", "workspace"]
    assert st.launches[1].function.endswith("_reduce")
    task, attrs = matmul_task((128, 1031), (1031, 67), "float32")
    params = dict(CudaSimtSplitKMatmul().space(_target(), 0)[0], split_k=4)
    st = CudaSimtSplitKMatmul().build(task, attrs, params, _target())
    assert st.workspace[0].shape == (4, 1, 128, 67) and len(st.launches) == 2


def test_gemv_vectors_only_where_rows_are_aligned_and_not_as_a_fusion_anchor():
    from hidet_framework.fusion.plan import ANCHOR_ATTRIBUTE
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda import CudaBackend

    def source(a, b, dtype, anchor=False):
        task, attrs = matmul_task(a, b, dtype)
        if anchor:
            attrs = {**attrs, ANCHOR_ATTRIBUTE: True}
        return generate_source(CudaGemvMatmul().build(task, attrs, _gemv(), _target()), CudaBackend(), _target())

    assert "uint4" in source((2, 256), (256, 512), "float16")
    assert "uint4" in source((2, 256), (256, 512), "float32")
    assert "uint4" not in source((2, 256), (256, 515), "float16")  # rows of B not 16-byte aligned
    assert "uint4" not in source((2, 256), (256, 512), "float16", anchor=True)


# ------------------------------------------------------------------ compile-only
def _compile_jobs():
    target = _target()
    jobs = []
    task, attrs = matmul_task((4, 4096), (4096, 1024), "float16")  # vector path, whole slices
    jobs += [(CudaGemvMatmul(), task, attrs, p) for p in CudaGemvMatmul().space(target, 2)]
    task, attrs = matmul_task((2, 13, 997), (1, 997, 131), "float32")  # element path, every guard live
    jobs += [(CudaGemvMatmul(), task, attrs, p) for p in CudaGemvMatmul().space(target, 1)]
    task, attrs = matmul_task((31, 1000), (1000, 136), "bfloat16")  # two M tiles, K tails
    jobs += [(CudaGemvMatmul(), task, attrs, p) for p in CudaGemvMatmul().space(target, 1)]
    task, attrs = matmul_task((2, 37, 1031), (1, 1031, 43), "float32")
    jobs += [(CudaSimtSplitKMatmul(), task, attrs, p) for p in CudaSimtSplitKMatmul().space(target, 2)]
    # the vector form (in level 2) and the cluster form (opt-in) on aligned rows: every
    # guard, then none (on the unaligned shape above, the vector candidates build the element form)
    task, attrs = matmul_task((2, 37, 1028), (1, 1028, 44), "float32")
    vec = splitk_vec_candidates(target, 2) + splitk_cluster_candidates(target, 2)
    jobs += [(CudaSimtSplitKMatmul(), task, attrs, p) for p in vec]
    task, attrs = matmul_task((128, 4096), (4096, 4096), "float32")  # the vector form, no guard
    jobs += [(CudaSimtSplitKMatmul(), task, attrs, p) for p in vec]
    task, attrs = matmul_task((100, 1000), (1000, 136), "float16")  # M, N and K edges (sm_90a)
    jobs += [(CudaHopperSkinnyMatmul(), task, attrs, p) for p in CudaHopperSkinnyMatmul().space(target, 2)]
    task, attrs = matmul_task((2, 32, 4096), (2, 4096, 256), "bfloat16")
    jobs += [(CudaHopperSkinnyMatmul(), task, attrs, p) for p in CudaHopperSkinnyMatmul().space(target, 1)]
    task, attrs = matmul_task((256, 128), (128, 64), "float16")  # the largest M: most accumulator registers
    skinny = CudaHopperSkinnyMatmul()
    jobs += [(skinny, task, attrs, dict(skinny.space(target, 0)[0], **p)) for p in SKINNY_PARAMS]
    return jobs


@pytest.mark.nvcc
def test_every_space2_candidate_compiles_to_sm90(tmp_path, monkeypatch):
    try:
        from hidet_plugin_cuda.nvrtc_build import choose_compiler

        choose_compiler()
    except Exception as exc:
        pytest.skip(f"no CUDA compiler: {exc}")
    from hidet_framework.runtime.compiled_task import build_in_parallel
    from hidet_plugin_cuda import CudaBackend

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    jobs = _compile_jobs()
    started = time.perf_counter()
    makers = [lambda j=j: j[0].build(j[1], j[2], j[3], _target()) for j in jobs]
    results = build_in_parallel(makers, CudaBackend(), _target(), workers=2, skip_renamed=True)
    failures = [(jobs[i][3], jobs[i][0].name, err) for i, path, err, _ in results if err]
    assert not failures, f"{len(failures)} of {len(jobs)} candidates failed; first: {failures[0]}"
    for _, path, _, _ in results:
        with open(path, "rb") as f:
            assert f.read(4) == b"\x7fELF"
    print(f"\ncompiled {len(jobs)} short-M candidates in {time.perf_counter() - started:.1f} s on 2 processes")


# --------------------------------------------------------------------------- GPU
GEMV_SHAPES = [((m, 97), (97, 131)) for m in range(1, 9)] + [
    ((13, 1031), (1031, 67)), ((31, 509), (509, 263)),          # prime K and N, two M tiles
    ((5, 4096), (4096, 1024)), ((8, 1000), (1000, 520)),        # vector path; K tails per slice
    ((2, 3, 211), (2, 211, 96)), ((1, 7, 128), (3, 128, 40)),   # batched; A broadcast over the batch
]
GEMV_PARAMS = [_gemv(), _gemv(split=1, lanes_k=1, warps=4), _gemv(split=32, unroll=8),
               _gemv(lanes_k=8, warps=4, split=16), _gemv(rows=16, lanes_k=2, warps=4, split=4),
               _gemv(rows=1, lanes_k=8, warps=32, split=2, unroll=4)]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shapes", GEMV_SHAPES, ids=str)
def test_gemv_matches_float64_reference(cuda_env, matmul_error, shapes, dtype):
    rng = np.random.default_rng()
    for params in GEMV_PARAMS:
        err = matmul_error(cuda_env, CudaGemvMatmul(), params, *shapes, dtype, rng)
        assert err < TOL[dtype], (params, err)


@pytest.mark.cuda
@pytest.mark.parametrize("shapes", [((13, 1031), (1031, 67)), ((128, 2048), (2048, 256)), ((1, 997), (997, 3)),
                                    ((2, 37, 1031), (1, 1031, 43))], ids=str)
def test_simt_splitk_matches_float64_reference(cuda_env, matmul_error, shapes):
    rng = np.random.default_rng()
    space = CudaSimtSplitKMatmul().space(cuda_env[1], 1)
    for params in space[:1] + space[1::6]:
        err = matmul_error(cuda_env, CudaSimtSplitKMatmul(), params, *shapes, "float32", rng)
        assert err < TOL["float32"], (params, err)


SKINNY_SHAPES = [((9, 64), (64, 8)), ((13, 1000), (1000, 136)), ((16, 4096), (4096, 512)),
                 ((31, 520), (520, 200)), ((32, 2048), (2048, 384)), ((100, 1032), (1032, 264)),
                 ((128, 1024), (1024, 256)), ((256, 128), (128, 64)), ((2, 17, 200), (2, 200, 72)),
                 ((1, 40, 96), (3, 96, 128))]


SKINNY_PARAMS = [{}, {"warpgroups": 2, "k_groups": 1, "stages": 3, "split": 3},
                 {"warpgroups": 1, "k_groups": 1, "stages": 2, "split": 1},
                 {"warpgroups": 2, "k_groups": 2, "stages": 4, "split": 16},
                 {"warpgroups": 1, "k_groups": 4, "stages": 2, "split": 2}]


def test_skinny_pipeline_shrinks_to_fit_every_applicable_shape():
    from hidet_plugin_matmul.cuda_hopper_skinny import skinny_config

    t = CudaHopperSkinnyMatmul()
    params = dict(t.space(_target(), 0)[0], warpgroups=2, k_groups=2, stages=4)
    cfg = skinny_config(params, 160)  # 4 stages asked, 3 fit in shared memory at M = 160
    assert (cfg["k_groups"], cfg["stages"]) == (2, 3)
    # M = 256: 512 threads leave 128 registers each, short of 128 accumulators + the rest
    # (ptxas refused it on the H200): one k-group, whose 4 stages fit
    cfg = skinny_config(params, 256)
    assert (cfg["k_groups"], cfg["stages"], cfg["threads"]) == (1, 4, 256)
    cfg = skinny_config(dict(params, warpgroups=1, k_groups=4), 256)
    assert (cfg["k_groups"], cfg["stages"]) == (2, 2) and cfg["smem"] <= 227 * 1024
    task, attrs = matmul_task((256, 128), (128, 64), "float16")
    for p in t.space(_target(), 2):  # M = 256: the most shared memory and registers a shape asks
        built = t.build(task, attrs, p, _target())  # the auto entry builds its modelled pick
        cfg = skinny_config(built.params, 256)
        assert cfg["smem"] <= 227 * 1024 and cfg["acc"] + 40 <= min(255, 65536 // cfg["threads"]), (p, cfg)
        assert built.launches


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shapes", SKINNY_SHAPES, ids=str)
def test_skinny_wgmma_matches_float64_reference(hopper, matmul_error, shapes, dtype):
    rng = np.random.default_rng()
    t = CudaHopperSkinnyMatmul()
    for extra in SKINNY_PARAMS:
        params = dict(t.space(hopper[1], 0)[0], **extra)
        err = matmul_error(hopper, t, params, *shapes, dtype, rng)
        assert err < TOL[dtype], (params, err)


def test_tuner_inputs_for_bfloat16_are_real_values_uploaded_as_bfloat16():
    """The driver's tuner times candidates on random inputs: bfloat16 ones must be real
    values (not raw small integers: denormals, near zero) and reach a device whose arrays
    carry a dtype as bfloat16 (a CUDA kernel refuses a uint16 array for a bf16 parameter)."""
    from hidet_framework.driver.scheduling import _random_array, _upload

    x = _random_array([1000], "bfloat16", np.random.default_rng(1))
    values = (x.astype(np.uint32) << 16).view(np.float32)
    assert x.dtype == np.uint16 and 0.5 < values.std() < 2.0 and np.isfinite(values).all()

    class Typed:
        def from_numpy(self, array, *, dtype=None, stream=None):
            return ("typed", array.dtype, dtype)

    class Plain:
        def from_numpy(self, array):
            return ("plain", array.dtype)

    assert _upload(Typed(), x, "bfloat16") == ("typed", np.uint16, "bfloat16")
    assert _upload(Plain(), x, "bfloat16") == ("plain", np.uint16)
    assert _upload(Typed(), x.astype(np.float32), "float32") == ("typed", np.float32, None)
