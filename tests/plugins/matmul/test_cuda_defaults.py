"""Space-0 defaults of the CUDA matmul / conv templates, chosen by the cost model of
`hidet_plugin_matmul.cuda_defaults` from each template's own level-2 space.

- no GPU: the model's arithmetic (occupancy, waves, split-K); the defaults chosen for
  the five models' GEMM shapes (and 4096^3, short M, unaligned N) fill the SMs of a
  simulated H200 (132 SMs) and of a simulated 46-SM GPU; the tuner's level 0 weighs
  the templates' modelled defaults (and keeps a template without a model by priority);
- compile-only (``nvcc``): every default chosen for those shapes compiles to sm_90a;
- GPU (``cuda``): chosen defaults on odd / prime / batched shapes against float64,
  outputs poisoned with NaN, split-K and not; the public path at space 0.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from hidet_framework.backend.contract import Target
from hidet_plugin_matmul.cuda_conv import CudaConvImplicitGemm, conv_auto, conv_space
from hidet_plugin_matmul.cuda_conv_op import ConvGeometry
from hidet_plugin_matmul.cuda_defaults import Gemm, Gpu, Kernel, modelled_seconds, occupancy
from hidet_plugin_matmul.cuda_simt import CudaSimtMatmul, simt_auto, simt_config, simt_space
from hidet_plugin_matmul.cuda_tensor_core import DEFAULT, CudaTensorCoreMatmul, tc_auto, tc_kernel, tc_legal, tc_space
from hidet_plugin_matmul.cuda_wgmma import CudaWgmmaMatmul, wgmma_auto, wgmma_config, wgmma_legal, wgmma_space
from hidet_plugin_matmul.operators import MatmulOperands, matmul_task


def h200() -> Target:
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def small_gpu() -> Target:
    """A 46-SM part of the same generation (fewer SMs, the same SM)."""
    return Target("cuda", "sm_90", dict(h200().properties, sm_count=46))


TARGETS = [h200, small_gpu]
# (M, N, K): BERT / GPT-2 at sequence 128, a 7x7 ResNet conv as a GEMM with N = 49
# pixels (unaligned: register-staged), short M, and a large square
GEMMS = [(128, 768, 768), (128, 2304, 768), (128, 3072, 768), (128, 768, 3072), (16, 4096, 4096),
         (512, 49, 4608), (4096, 4096, 4096), (1021, 3001, 997)]
# ResNet-50 convolutions at batch 1: (C, O, H, kernel, stride)
CONVS = [(3, 64, 224, 7, 2), (64, 64, 56, 3, 1), (64, 64, 56, 1, 1), (256, 128, 56, 1, 1), (128, 128, 28, 3, 1),
         (1024, 256, 14, 1, 1), (512, 512, 7, 3, 1), (2048, 512, 7, 1, 1)]


def ops_of(m: int, n: int, k: int) -> MatmulOperands:
    return MatmulOperands({"m": m, "n": n, "k": k})


def conv_geo(c: int, o: int, h: int, kernel: int, stride: int) -> ConvGeometry:
    return ConvGeometry(1, c, h, h, o, (kernel, kernel), (stride, stride), (kernel // 2,) * 4, (1, 1), 1)


def items(m: int, n: int, bm: int, bn: int, split: int = 1) -> int:
    return math.ceil(m / bm) * math.ceil(n / bn) * split


# ------------------------------------------------------------------ the model
def test_occupancy_takes_the_tightest_resource():
    gpu = Gpu.from_target(h200())
    k = Kernel(128, 128, 32, 256, 48 * 1024, 128, 3)
    assert occupancy(k, gpu) == 2  # registers: 128 x 256 x 2 = 64K
    assert occupancy(Kernel(128, 128, 32, 256, 48 * 1024, 64, 3), gpu) == 4  # then shared memory
    assert occupancy(Kernel(64, 64, 32, 128, 8 * 1024, 32, 3), gpu) == 16  # then threads
    assert occupancy(Kernel(128, 256, 64, 256, 300 * 1024, 64, 4), gpu) == 0
    assert modelled_seconds(Gemm(64, 64, 64), Kernel(128, 256, 64, 256, 300 * 1024, 64, 4), gpu) == math.inf


def test_waves_split_k_and_sm_count():
    big, few = Gpu.from_target(h200()), Gpu.from_target(small_gpu())
    k = Kernel(128, 128, 32, 256, 48 * 1024, 128, 3)
    # one wave on 132 SMs x 2 blocks, about three on 46 SMs
    g = Gemm(128 * 12, 128 * 22, 4096)
    assert modelled_seconds(g, k, few) > 2.5 * modelled_seconds(g, k, big)
    assert modelled_seconds(Gemm(128 * 24, 128 * 22, 4096), k, big) > 1.8 * modelled_seconds(g, k, big)
    # split-K pays where tiles are few and K is long, not where tiles fill the GPU
    split = attrs_evolve(k, split=8)
    assert modelled_seconds(Gemm(128, 128, 16384), split, big) < 0.5 * modelled_seconds(Gemm(128, 128, 16384), k, big)
    assert modelled_seconds(Gemm(4096, 4096, 512), split, big) > modelled_seconds(Gemm(4096, 4096, 512), k, big)


def attrs_evolve(kernel: Kernel, **changes) -> Kernel:
    import attrs

    return attrs.evolve(kernel, **changes)


# ------------------------------------------------------------- the choices
@pytest.mark.parametrize("make_target", TARGETS, ids=["h200", "46sm"])
def test_tensor_core_defaults_fill_the_gpu(make_target):
    target = make_target()
    sms = target["sm_count"]
    space = tc_space(target, 2)
    for m, n, k in GEMMS:
        p, seconds = tc_auto(ops_of(m, n, k), 2, target)
        assert p in space and tc_legal(p, target) and not p.get("pad"), (m, n, k, p)
        finest = items(m, n, 64, 64)
        got = items(m, n, p["block_m"], p["block_n"], p["split_k"])
        assert got >= min(sms // 2, finest), (m, n, k, p)  # no SM left idle that a tile could use
        fixed = items(m, n, DEFAULT["block_m"], DEFAULT["block_n"])
        assert fixed >= sms or got >= fixed  # where v3's fixed tile left SMs idle, never fewer blocks
        assert seconds <= CudaTensorCoreMatmul().estimate(*matmul_task((m, k), (k, n), "float16"), DEFAULT, target)
    # few tiles, long K: split-K; a large square: one big tile per block, no split, full waves
    for m, n, k in [(512, 49, 4608)] + ([(128, 768, 3072)] if sms > 100 else []):
        assert tc_auto(ops_of(m, n, k), 2, target)[0]["split_k"] > 1, (m, n, k)
    p = tc_auto(ops_of(4096, 4096, 4096), 2, target)[0]
    assert p["split_k"] == 1 and p["block_m"] * p["block_n"] >= 128 * 128
    blocks = items(4096, 4096, p["block_m"], p["block_n"])
    occ = occupancy(tc_kernel(p, "cp"), Gpu.from_target(target))
    assert blocks / (math.ceil(blocks / (sms * occ)) * sms * occ) >= 0.75  # the last wave nearly full


@pytest.mark.parametrize("make_target", TARGETS, ids=["h200", "46sm"])
def test_wgmma_and_simt_defaults_fill_the_gpu(make_target):
    target = make_target()
    sms = target["sm_count"]
    for m, n, k in [s for s in GEMMS if s[1] % 8 == 0 and s[2] % 8 == 0]:
        p, _ = wgmma_auto(ops_of(m, n, k), 2, target)
        cfg = wgmma_config(p)
        assert p in wgmma_space(target, 2) and wgmma_legal(p, target)
        # the space's smallest tiles are 64 x 256 and 128 x 128
        assert items(m, n, cfg["bm"], cfg["bn"]) >= min(sms // 2, items(m, n, 64, 256), items(m, n, 128, 128))
    if sms > 100:  # 4096^3 on the H200: the largest tile (4 waves of 128 x 256 blocks)
        p = wgmma_auto(ops_of(4096, 4096, 4096), 2, target)[0]
        assert wgmma_config(p)["bm"] * p["block_n"] == 128 * 256
    for m, n, k in GEMMS:
        p, _ = simt_auto(ops_of(m, n, k), target)
        cfg = simt_config(p)
        assert p in simt_space(target, 2)
        assert items(m, n, cfg["bm"], cfg["bn"]) >= min(sms // 2, items(m, n, 32, 32)), (m, n, k, p)


@pytest.mark.parametrize("make_target", TARGETS, ids=["h200", "46sm"])
def test_conv_defaults_fill_the_gpu(make_target):
    target = make_target()
    sms = target["sm_count"]
    space = conv_space(target, 2)
    for spec in CONVS:
        geo = conv_geo(*spec)
        p, _ = conv_auto(geo, target)
        assert p in space and tc_legal(p, target), (spec, p)
        got = items(geo.m, geo.cog, p["block_m"], p["block_n"], p["split_k"])
        assert got >= min(sms // 2, items(geo.m, geo.cog, 64, 64)), (spec, p)
        if geo.m <= 64 and geo.k >= 4096:  # 7x7 maps with deep reductions: split-K
            assert p["split_k"] > 1, (spec, p)
        if geo.m >= 3136:  # 56x56 maps fill the GPU with tiles alone
            assert p["split_k"] == 1, (spec, p)
    # the NHWC copy launch (cp.async gathers) pays on long reductions; on a 1x1 conv from
    # 64 channels the register-staged gather from NCHW, without the copy, is cheaper
    assert conv_auto(conv_geo(64, 64, 56, 1, 1), target)[0].get("reg_stage")
    assert not conv_auto(conv_geo(1024, 256, 14, 1, 1), target)[0].get("reg_stage")
    assert not conv_auto(conv_geo(256, 256, 14, 3, 1), target)[0].get("reg_stage")


# --------------------------------------------------------- the tuner's level 0
def _cuda_templates(task, attrs):
    from hidet_framework.extension import plugin_host

    return [t for t in plugin_host().templates.templates_for("matmul", "cuda") if t.applies(task, attrs)]


def test_level0_weighs_the_modelled_defaults_of_the_templates():
    from hidet_framework.tuner import candidates_of

    target = h200()
    names = {}
    for shape in [(128, 768, 768), (4096, 4096, 4096), (1, 768, 768)]:
        m, n, k = shape
        task, attrs = matmul_task((m, k), (k, n), "float16")
        (cand,) = candidates_of(_cuda_templates(task, attrs), target, 0, task, attrs)
        names[shape] = cand.template.name
    # a few wgmma tiles without split-K idle the H200 at 128 rows; mma.sync fills it
    assert names[(128, 768, 768)] == "matmul.cuda_tensor_core"
    assert names[(4096, 4096, 4096)] == "matmul.cuda_wgmma"
    assert names[(1, 768, 768)] == "matmul.cuda_gemv"  # no model: its priority (4) decides
    task, attrs = matmul_task((128, 768), (768, 768), "float16")
    (cand,) = candidates_of(_cuda_templates(task, attrs), target, 0)  # no task: priority only
    assert cand.template.name == "matmul.cuda_wgmma"


def test_skinny_model_prefers_split_k_at_128x768x3072_and_refuses_prologues():
    """The skinny template's model (priority 0: never the level-0 default) ranks the W1
    sweep's fastest candidate first and prices a prologue-fed anchor infinite."""
    from hidet_framework.fusion.plan import PROLOGUE_INPUTS_ATTRIBUTE
    from hidet_framework.tuner import candidates_of
    from hidet_plugin_matmul.cuda_hopper_skinny import CudaHopperSkinnyMatmul, skinny_auto

    target = h200()
    task, attrs = matmul_task((128, 3072), (3072, 768), "float16")
    params, _ = skinny_auto(MatmulOperands(attrs), 2, target)
    assert params["split"] == 8 and params["warpgroups"] == 1  # W1: 6.65 us, the fastest of 242
    (cand,) = candidates_of(_cuda_templates(task, attrs), target, 0, task, attrs)
    assert cand.template.name != "matmul.cuda_hopper_skinny"
    staged = dict(attrs, **{PROLOGUE_INPUTS_ATTRIBUTE: (0,)})
    assert CudaHopperSkinnyMatmul().estimate(task, staged, {"auto": 1}, target) == math.inf
    assert CudaHopperSkinnyMatmul().estimate(task, attrs, {"auto": 1}, target) < math.inf


class _Fake:
    operator, target, version = "matmul", "cuda", "1"

    def __init__(self, name, priority, seconds):
        self.name, self.priority, self.seconds = name, priority, seconds

    def bounded_space(self, target, level):
        return [{"which": self.name}]

    def estimate(self, task, attributes, params, target):
        if self.seconds == "fail":
            raise RuntimeError("model broke")
        return self.seconds


def test_level0_rules_with_fake_templates():
    from hidet_framework.tuner import candidates_of

    def pick(*templates):
        return candidates_of(list(templates), h200(), 0, object(), {})[0].template.name

    a, b = _Fake("a", 2, 5e-6), _Fake("b", 3, 9e-6)
    assert pick(a, b) == "a"  # modelled faster wins over priority
    assert pick(a, b, _Fake("never", 0, 1e-9)) == "a"  # priority 0: never the default
    assert pick(a, b, _Fake("top", 4, None)) == "top"  # the top template has no model: priority
    assert pick(a, b, _Fake("broken", 1, "fail")) == "a"  # a failing model is no model
    assert pick(_Fake("only", 0, 1.0)) == "only"


# ------------------------------------------------------------- compile-only
def _default_jobs():
    target = h200()
    jobs = []
    for m, n, k in GEMMS[:-2] + [(61, 251, 997)]:
        task, attrs = matmul_task((m, k), (k, n), "float16")
        jobs.append((CudaTensorCoreMatmul(), task, attrs, {"auto": 1}))
        if n % 8 == 0 and k % 8 == 0:
            jobs.append((CudaWgmmaMatmul(), task, attrs, {"auto": 1}))
    task, attrs = matmul_task((128, 3072), (3072, 768), "float32")
    jobs.append((CudaSimtMatmul(), task, attrs, {"auto": 1}))
    import hidet_framework as hf
    from hidet_plugin_matmul.cuda_conv_op import conv2d_igemm

    for spec in CONVS[:1] + CONVS[-2:] + [(64, 64, 56, 1, 1)]:
        geo = conv_geo(*spec)
        y = conv2d_igemm(hf.symbol(geo.x_shape, "float16"), hf.symbol(geo.w_shape, "float16"), geo)
        jobs.append((CudaConvImplicitGemm(), y.producer.task, dict(y.producer.attributes), {"auto": 1}))
    return jobs, target


@pytest.mark.nvcc
def test_chosen_defaults_compile_to_sm90a(tmp_path, monkeypatch):
    try:
        from hidet_plugin_cuda.nvrtc_build import choose_compiler

        choose_compiler()
    except Exception as exc:
        pytest.skip(f"no CUDA compiler: {exc}")
    from hidet_framework.runtime.compiled_task import build_in_parallel
    from hidet_plugin_cuda import CudaBackend

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    jobs, target = _default_jobs()
    makers = [lambda j=j: j[0].build(j[1], j[2], j[3], target) for j in jobs]
    results = build_in_parallel(makers, CudaBackend(), target, workers=2)
    failures = [(jobs[i][0].name, err) for i, _, err, _ in results if err]
    assert not failures, failures[0]
    splits = [makers[i]().params.get("split_k", 1) for i in range(len(jobs))]
    assert max(splits) > 1 and min(splits) == 1  # both kinds were built


# --------------------------------------------------------------------- GPU
GPU_SHAPES = [((1, 1), (1, 1)), ((61, 997), (997, 251)), ((3, 33, 24), (3, 24, 40)), ((128, 3072), (3072, 768)),
              ((37, 4104), (4104, 72)), ((257, 520), (520, 1031)), ((4, 40, 64), (1, 64, 72))]


def _gpu_jobs(target):
    """(template, a_shape, b_shape, dtype) of every default the GPU test runs."""
    jobs = []
    for dtype in ("float16", "bfloat16", "float32"):
        templates = [CudaSimtMatmul()] if dtype == "float32" else [CudaTensorCoreMatmul(), CudaWgmmaMatmul()]
        for a_shape, b_shape in GPU_SHAPES:
            for t in templates:
                task, attrs = matmul_task(a_shape, b_shape, dtype)
                if t.applies(task, attrs) and t.space(target, 0):
                    jobs.append((t, a_shape, b_shape, dtype))
    return jobs


@pytest.fixture(scope="module")
def built_defaults(cuda_env):
    """The GPU test's defaults built once in parallel (its own compiles then hit the
    build cache)."""
    from hidet_framework.runtime.compiled_task import build_in_parallel

    backend, target, _ = cuda_env
    jobs = _gpu_jobs(target)
    makers = [lambda j=j: j[0].build(*matmul_task(j[1], j[2], j[3]), {"auto": 1}, target) for j in jobs]
    results = build_in_parallel(makers, backend, target, workers=min(16, os.cpu_count() or 1))
    errors = [err for _, _, err, _ in results if err]
    assert not errors, errors[0]
    return jobs


@pytest.mark.cuda
def test_chosen_defaults_match_float64_reference(cuda_env, matmul_error, built_defaults):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    target = cuda_env[1]
    splits = set()
    for t, a_shape, b_shape, dtype in built_defaults:
        task, attrs = matmul_task(a_shape, b_shape, dtype)
        splits.add(t.build(task, attrs, {"auto": 1}, target).params.get("split_k", 1))
        err = matmul_error(cuda_env, t, {"auto": 1}, a_shape, b_shape, dtype, rng)
        assert err < (1e-5 if dtype == "float32" else 1e-2), (t.name, a_shape, b_shape, dtype, err)
    assert 1 in splits and max(splits) > 1, splits  # the shapes make the model choose both


@pytest.mark.cuda
def test_public_path_at_space0_picks_by_the_model(cuda_env):
    import hidet_framework as hf

    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    a = rng.standard_normal((128, 768)).astype(np.float16)
    w = rng.standard_normal((768, 3072)).astype(np.float16)
    x = hf.symbol(a.shape, "float16")
    fn = hf.compile(hf.trace(hf.ops.matmul(x, hf.constant(w)), inputs=[x]), target="cuda", space=0)
    got = np.asarray(fn(a), dtype=np.float64)
    want = a.astype(np.float64) @ w.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2
    # 128 rows: the mma.sync template's modelled default beats wgmma's few large tiles
    sources = {getattr(getattr(t, "scheduled", None), "source", "") for t in fn.tasks}
    assert "matmul.cuda_tensor_core" in sources, sources


@pytest.mark.cuda
def test_v4_short_m_candidates_match_float64_reference(cuda_env, matmul_error):
    """The tiles of one or two warps and split-K with BK 64 (level 2, v4), cp.async and
    register-staged (odd N / K), against float64 with poisoned outputs."""
    from hidet_plugin_matmul.cuda_tensor_core import SMALL_TILES, _params

    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    target = cuda_env[1]
    space = tc_space(target, 2)
    cands = [_params(t, 64, 4) for t in SMALL_TILES] + [_params(SMALL_TILES[0], 64, 4, 4), _params(SMALL_TILES[2], 32, 5)]
    assert all(p in space for p in cands)
    for a_shape, b_shape in (((67, 520), (520, 136)), ((37, 997), (997, 61)), ((2, 33, 64), (2, 64, 40))):
        for p in cands:
            err = matmul_error(cuda_env, CudaTensorCoreMatmul(), p, a_shape, b_shape, "float16", rng)
            assert err < 1e-2, (p, a_shape, b_shape, err)
