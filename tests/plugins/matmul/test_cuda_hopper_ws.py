"""The warp-specialised, TMA-fed, persistent wgmma template (`matmul.cuda_hopper_ws`)
and the tensor-map kernel parameters it needs.

Offline: the space (sm_90 only, bounded, every candidate within registers and shared
memory); the kernel signature gets one ``const __grid_constant__`` map per mapped
tensor, the KernelSpec lists them last with their boxes; packing encodes each map from
its tensor's pointer and re-encodes it when a launch plan binds another buffer; fusion
may graft onto C but never onto A or B (the TMA reads them, not the IR's loads).
Compile-only (``nvcc``): every space-2 candidate plus bf16 batched ones, in one nvcc
process. GPU (``cuda``): odd and prime shapes, batched and broadcast operands, against
a float64 reference with outputs poisoned; a CUDA-graph launch plan rebound to new
buffers.
"""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import time

import numpy as np
import pytest

from hidet_plugin_matmul.cuda_hopper_ws import DEFAULT, CudaHopperWsMatmul, ws_config
from hidet_plugin_matmul.operators import matmul_task

from .sm90 import sm90_target


def _lowered(shapes, dtype="float16", params=None, target=None):
    from hidet_framework.lowering.pipeline import lower

    t, target = CudaHopperWsMatmul(), target or sm90_target()
    task, attrs = matmul_task(*shapes, dtype)
    scheduled = t.build(task, attrs, params or DEFAULT, target)
    return scheduled, lower(scheduled.module, "cuda")


# ------------------------------------------------------------------ offline
def test_space_is_hopper_only_bounded_and_fits_the_hardware(monkeypatch):
    monkeypatch.delenv("HIDET_FRAMEWORK_HOPPER_WS_MODEL", raising=False)
    t = CudaHopperWsMatmul()
    assert t.space(sm90_target("sm_80"), 2) == [] and t.space(sm90_target("sm_100"), 1) == []
    s0, s1, s2 = (t.space(sm90_target(), level) for level in (0, 1, 2))
    assert len(s0) == 1 and 1 < len(s1) <= 30 and len(s1) <= len(s2) <= 200
    assert s0 == [DEFAULT] and s1[0] == s2[0] == DEFAULT
    assert len({tuple(sorted(p.items())) for p in s2}) == len(s2)
    for p in s2:
        cfg = ws_config(p)
        assert cfg["acc"] <= 128 and cfg["bm"] <= 256 and cfg["smem"] + 1024 <= 227 * 1024, p
    assert {p["cluster"] for p in s2} == {1} and {p["persistent"] for p in s2} == {1}  # measured slower
    small = sm90_target(smem_per_block_optin=100 * 1024)
    assert all(ws_config(p)["smem"] <= 100 * 1024 for p in t.space(small, 2)[1:])
    assert max(p["stages"] for p in t.space(small, 2)[1:]) < max(p["stages"] for p in s2)
    assert {p["split"] for p in s1} == {p["split"] for p in s2} == {1, 2, 4}
    assert {p["epilogue"] for p in s1} == {1} and {p["epilogue"] for p in s2} == {0, 1}
    monkeypatch.setenv("HIDET_FRAMEWORK_HOPPER_WS_MODEL", "1")  # the opt-in cost-model path
    assert t.space(sm90_target(), 0) == [{"auto": 1}] and t.space(sm90_target(), 1)[:2] == [{"auto": 1}, DEFAULT]


def test_level0_model_is_opt_in(monkeypatch):
    """Off by default (its level-0 picks not yet timed against the defaults): level 0 stays as before;
    with HIDET_FRAMEWORK_HOPPER_WS_MODEL=1 the model picks this template at 4096^3 and
    never where a prologue must be grafted."""
    import math

    from hidet_framework.extension import plugin_host
    from hidet_framework.fusion.plan import PROLOGUE_INPUTS_ATTRIBUTE
    from hidet_framework.tuner import candidates_of

    task, attrs = matmul_task((4096, 4096), (4096, 4096), "float16")
    templates = [t for t in plugin_host().templates.templates_for("matmul", "cuda") if t.applies(task, attrs)]
    pick = lambda: candidates_of(templates, sm90_target(), 0, task, attrs)[0].template.name  # noqa: E731
    monkeypatch.delenv("HIDET_FRAMEWORK_HOPPER_WS_MODEL", raising=False)
    assert CudaHopperWsMatmul().estimate(task, attrs, DEFAULT, sm90_target()) is None
    assert pick() == "matmul.cuda_wgmma"
    monkeypatch.setenv("HIDET_FRAMEWORK_HOPPER_WS_MODEL", "1")
    assert pick() == "matmul.cuda_hopper_ws"
    prologue = dict(attrs, **{PROLOGUE_INPUTS_ATTRIBUTE: (0,)})
    assert CudaHopperWsMatmul().estimate(task, prologue, {"auto": 1}, sm90_target()) == math.inf


def test_applies_to_half_types_with_aligned_rows_only():
    t = CudaHopperWsMatmul()
    for a, b, dtype, ok in [((64, 64), (64, 64), "float16", True), ((7, 24), (24, 16), "bfloat16", True),
                            ((64, 63), (63, 64), "float16", False), ((64, 64), (64, 60), "bfloat16", False),
                            ((64, 64), (64, 64), "float32", False)]:
        task, attrs = matmul_task(a, b, dtype)
        assert t.applies(task, attrs) is ok, (a, b, dtype)
    task, attrs = matmul_task((64, 64), (64, 64), "float16")
    with pytest.raises(ValueError, match="does not fit"):
        t.build(task, attrs, {"consumers": 2, "m_tiles": 2, "block_n": 256, "stages": 4, "raster": 0}, sm90_target())
    with pytest.raises(ValueError, match="does not fit"):  # 512 threads: ptxas cannot fit 128 accumulators
        t.build(task, attrs, {"consumers": 3, "m_tiles": 1, "block_n": 256, "stages": 3, "raster": 0}, sm90_target())


@pytest.mark.parametrize("grid_m, grid_n, batch, raster, cl, sms",
                         [(32, 16, 1, 0, 1, 132), (32, 16, 1, 8, 1, 132), (11, 5, 3, 8, 1, 132), (7, 3, 2, 0, 2, 132),
                          (9, 4, 1, 8, 2, 10), (1, 1, 1, 0, 2, 132), (17, 3, 1, 8, 1, 7)])
def test_persistent_blocks_cover_every_tile_once(grid_m, grid_n, batch, raster, cl, sms):
    """The persistent loop as the kernel runs it (blocks, work units, ranks), with the
    grid the template launches; with clusters an odd M gets one phantom tile."""
    from hidet_plugin_matmul.cuda_hopper_ws import ws_tile

    unit_m = -(-grid_m // cl)
    units = unit_m * grid_n * batch
    grid = min(units, sms // cl) * cl
    seen = [ws_tile(t, block % cl, grid_n, unit_m, batch, raster, cl)
            for block in range(grid) for t in range(block // cl, units, grid // cl)]
    real = [x for x in seen if x[1] < grid_m]
    assert sorted(real) == [(z, i, j) for z in range(batch) for i in range(grid_m) for j in range(grid_n)]
    assert len(seen) - len(real) == (unit_m * cl - grid_m) * grid_n * batch


def test_signature_appends_grid_constant_maps_and_the_spec_lists_them_last():
    from hidet_plugin_cuda.codegen import generate, kernel_specs

    _, lowered = _lowered(((131, 200), (200, 264)))
    source = generate(lowered)
    for text in ("const __grid_constant__ hf_tensor_map_t hf_tmap_a", "const __grid_constant__ hf_tensor_map_t hf_tmap_b",
                 "struct __align__(64) hf_tensor_map_t", "cp.async.bulk.tensor.2d.shared::cluster.global",
                 "mbarrier.arrive.expect_tx", "mbarrier.try_wait.parity", "wgmma.wait_group.sync.aligned 1;",
                 "setmaxnreg.dec.sync.aligned.u32 40;", "setmaxnreg.inc.sync.aligned.u32 232;",
                 "__launch_bounds__(384, 1)"):
        assert text in source, text
    (spec,) = kernel_specs(lowered)
    assert [p.kind for p in spec.params] == ["tensor"] * 3 + ["tensormap"] * 2
    assert spec.params[3].tensor_map == (0, 128, (128, 64)) and spec.params[3].shape == (131, 200)
    assert spec.params[4].tensor_map == (1, 128, (64, 64)) and spec.params[4].shape == (200, 264)
    assert tuple(spec.grid)[0] == min(2 * 2, 132)  # 128 x 256 tiles
    # a saved model writes the parameters as JSON lists (runtime/saved_graph._kernel_json)
    from hidet_plugin_cuda.kernel import ParamSpec

    for p in spec.params:
        row = [p.name, p.kind, p.dtype, list(p.shape)] + ([p.tensor_map] if p.tensor_map else [])
        assert ParamSpec(*json.loads(json.dumps(row))) == p  # persistent: no more blocks than tiles or SMs
    # batched A and broadcast B: rank-3 maps, boxes one batch deep
    _, lowered = _lowered(((3, 40, 64), (1, 64, 72)), "bfloat16")
    (spec,) = kernel_specs(lowered)
    assert [p.tensor_map for p in spec.params[3:]] == [(0, 128, (1, 128, 64)), (1, 128, (1, 64, 64))]
    assert "cp.async.bulk.tensor.3d" in generate(lowered)


def test_cluster_candidates_multicast_b_and_release_stages_in_both_blocks():
    from hidet_plugin_cuda.codegen import generate, kernel_specs

    params = dict(DEFAULT, cluster=2)
    _, lowered = _lowered(((300, 200), (200, 264)), params=params)
    source = generate(lowered)
    for text in ("__cluster_dims__(2, 1, 1)", ".multicast::cluster [%0], [%1, {%2, %3}], [%4], hf_mask;",
                 "mapa.shared::cluster.u32", "mbarrier.arrive.release.cluster.shared::cluster.b64",
                 "barrier.cluster.arrive.release;"):
        assert text in source, text
    assert source.count("barrier.cluster.wait.acquire") == 2  # after the barriers' init, before exit
    (spec,) = kernel_specs(lowered)
    assert tuple(spec.grid)[0] % 2 == 0  # whole clusters
    plain = generate(_lowered(((300, 200), (200, 264)))[1])
    assert "__cluster_dims__" not in plain and "multicast" not in plain and "mapa" not in plain


def test_staged_epilogue_only_with_its_shared_memory():
    """The staging chunks lie past the ring: a kernel may write them only when its
    dynamic shared memory includes them (a split asked for but collapsed to one slice,
    K = 24, once wrote past the allocation: an illegal address on the H200)."""
    from hidet_plugin_cuda.codegen import generate

    for shapes in (((127, 24), (24, 264)), ((127, 1000), (1000, 264))):
        for extra in ({}, {"split": 8}, {"epilogue": 0}):
            params = dict(DEFAULT, **extra)
            scheduled, lowered = _lowered(shapes, params=params)
            cfg = ws_config(scheduled.params)  # a split that K cannot make is built unsplit
            assert ("hf_pair" in generate(lowered)) == (cfg["smem"] > cfg["ring"]), (shapes, extra)
            kernel = scheduled.module.functions[scheduled.launches[0].function]
            assert kernel.attrs["dynamic_smem_bytes"] == cfg["smem"]


def test_sources_without_tensor_maps_are_unchanged():
    from hidet_plugin_cuda.codegen import generate
    from hidet_plugin_matmul.cuda_wgmma import CudaWgmmaMatmul
    from hidet_framework.lowering.pipeline import lower

    t = CudaWgmmaMatmul()
    task, attrs = matmul_task((130, 200), (200, 264), "float16")
    source = generate(lower(t.build(task, attrs, t.space(sm90_target(), 0)[0], sm90_target()).module, "cuda"))
    assert "hf_tensor_map_t" not in source and "__grid_constant__" not in source


def _fake_encoder(monkeypatch):
    """Stands in for cuTensorMapEncodeTiled (no driver here): the map's first words
    are the address, the box and the swizzle."""
    from hidet_plugin_cuda import hopper, kernel

    calls = []

    def encode(address, dtype, dims, box, swizzle_bytes=0, pitches=None):
        calls.append((address, dtype, dims, box, swizzle_bytes))
        words = [address, *box, swizzle_bytes] + [0] * (16 - 2 - len(box))
        return b"".join(int(w).to_bytes(8, "little") for w in words)

    monkeypatch.setattr(hopper, "encode_tensor_map", encode)
    kernel._encoded.cache_clear()
    return calls


def test_packing_encodes_maps_from_pointers_and_rebinding_reencodes(monkeypatch):
    from hidet_plugin_cuda.codegen import kernel_specs
    from hidet_plugin_cuda.kernel import MappedPointer, TensorMapValue, pack_arguments
    from hidet_plugin_cuda.memory import DeviceArray

    calls = _fake_encoder(monkeypatch)
    _, lowered = _lowered(((131, 200), (200, 264)))
    (spec,) = kernel_specs(lowered)
    a, b, c = (DeviceArray(p, s, "float16") for p, s in ((0x10000, (131, 200)), (0x20000, (200, 264)),
                                                          (0x30000, (131, 264))))
    values, _ = pack_arguments(spec, [a, b, c])
    assert len(values) == 5 and isinstance(values[0], MappedPointer) and isinstance(values[3], TensorMapValue)
    assert list(values[3].words)[:4] == [0x10000, 128, 64, 128]
    assert list(values[4].words)[:4] == [0x20000, 64, 64, 128]
    assert calls[0] == (0x10000, "float16", (131, 200), (128, 64), 128)
    values[0].value = 0x50000  # what LaunchPlan._rebind does for a new input buffer
    assert list(values[3].words)[0] == 0x50000 and values[0].value == 0x50000
    assert ctypes.c_uint64.from_address(ctypes.addressof(values[0])).value == 0x50000
    assert list(values[4].words)[0] == 0x20000  # B's map untouched
    with pytest.raises(Exception, match="takes 3 arguments"):
        pack_arguments(spec, [a, b, c, a])


def test_tensor_map_param_refuses_what_tma_cannot_map():
    from hidet_framework.ir.expr import var
    from hidet_framework.ir.types import TensorType
    from hidet_framework.ir import dtypes
    from hidet_plugin_cuda import hopper as hw

    x = var("x", TensorType(dtypes.float16, (64, 64)))
    with pytest.raises(ValueError, match="box"):
        hw.tensor_map_param(x, (64,))
    with pytest.raises(TypeError):
        hw.tensor_map_param(x[0, 0], (64, 64))
    with pytest.raises(ValueError, match="swizzle"):
        hw.tensor_map_param(x, (64, 64), swizzle_bytes=16)
    with pytest.raises(ValueError, match="tensor maps here take"):
        hw.encode_tensor_map(0, "int16", (8, 8), (8, 8))
    with pytest.raises(ValueError, match="exceeds"):
        hw.encode_tensor_map(0, "float16", (4, 128, 128), (1, 8, 128), swizzle_bytes=128)


def test_fusion_grafts_onto_c_only():
    from hidet_framework.fusion.bound_kernel import check_param_uses
    from hidet_framework.fusion.plan import FusionError

    scheduled, _ = _lowered(((131, 200), (200, 264)))
    (fn,) = scheduled.module.functions.values()
    for index, shape in ((0, (131, 200)), (1, (200, 264))):
        with pytest.raises(FusionError, match="other than through elements"):
            check_param_uses(fn, fn.params[index], "read", shape)
    check_param_uses(fn, fn.params[2], "write", (131, 264))  # the epilogue stays graftable


# ------------------------------------------------------------- compile-only
def _compile_jobs():
    t, target = CudaHopperWsMatmul(), sm90_target()
    jobs = []
    task, attrs = matmul_task((130, 200), (200, 264), "float16")
    jobs += [(task, attrs, p) for p in t.space(target, 2)]
    task, attrs = matmul_task((3, 61, 200), (1, 200, 136), "bfloat16")
    jobs += [(task, attrs, p) for p in (t.space(target, 1)[1], dict(DEFAULT, cluster=2), t.space(target, 0)[0],
                                        {"auto": 1}, dict(DEFAULT, cluster=2, persistent=0))]
    return t, target, jobs


def compile_with_nvcc(sources: list, folder, processes: int = 2) -> str:
    """Compile many generated CUDA sources with few nvcc processes: they share the
    preamble, so their kernels (unique names) are concatenated under one copy of it,
    in `processes` files compiled at once for sm_90a. Returns ptxas's report."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc")
    split = [s.split("/* prototypes */", 1) for s in sources]
    assert len({head.split("\n", 1)[1] for head, _ in split}) == 1, "the sources' preambles differ"
    procs = []
    for i in range(processes):
        part = split[i::processes]
        if not part:
            continue
        path = folder / f"part{i}.cu"
        path.write_text(part[0][0] + "/* prototypes */" + "\n".join(body for _, body in part))
        procs.append(subprocess.Popen([nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
                                       "-diag-suppress", "177", "-o", str(path.with_suffix(".cubin")), str(path)],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate()[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    return "".join(logs)


@pytest.mark.nvcc
def test_every_space2_candidate_compiles_for_sm90a(tmp_path):
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda import CudaBackend

    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    t, target, jobs = _compile_jobs()
    started = time.perf_counter()
    built = [t.build(task, attrs, p, target) for task, attrs, p in jobs]
    sources = [generate_source(b, CudaBackend(), target) for b in built]
    generated = time.perf_counter() - started
    log = compile_with_nvcc(sources, tmp_path)
    assert "C7514" not in log and "C7508" not in log, "wgmma serialised or setmaxnreg ignored"
    assert "spill" not in log.replace("0 bytes spill", "")
    assert log.count("Compiling entry function") == sum(len(b.launches) for b in built)  # split-K: + reduce
    print(f"\n{len(jobs)} hopper_ws candidates: generated in {generated:.1f} s, compiled by 2 nvcc in "
          f"{time.perf_counter() - started - generated:.1f} s")


# --------------------------------------------------------------------- GPU
SHAPES = [  # edges in M, N and K, K below one k-tile, primes; batched and broadcast operands
    ((1, 8), (8, 8)), ((127, 64), (64, 136)), ((131, 200), (200, 264)), ((257, 1000), (1000, 520)),
    ((3, 33, 24), (3, 24, 40)), ((4, 40, 64), (1, 64, 72)), ((1021, 3000), (3000, 1000)),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_default_matches_float64_reference(hopper, matmul_error, shapes, dtype):
    t = CudaHopperWsMatmul()
    assert matmul_error(hopper, t, t.space(hopper[1], 0)[0], *shapes, dtype, np.random.default_rng()) < 1e-2


@pytest.mark.cuda
@pytest.mark.parametrize("index", range(1, 17))
def test_space1_candidates_match_float64_reference(hopper, matmul_error, index):
    t = CudaHopperWsMatmul()
    space = t.space(hopper[1], 1)
    if index >= len(space):
        pytest.skip("space 1 is smaller")
    rng = np.random.default_rng()
    for shapes in (((300, 520), (520, 264)), ((1100, 136), (136, 2056))):  # 1100 rows: raster's last group
        assert matmul_error(hopper, t, space[index], *shapes, "float16", rng) < 1e-2, (space[index], shapes)


@pytest.mark.cuda
@pytest.mark.parametrize("shapes", [((300, 200), (200, 264)), ((3, 131, 72), (1, 72, 520)), ((1, 8), (8, 8))],
                         ids=str)
def test_cluster_candidates_match_float64_reference(hopper, matmul_error, shapes):
    """Pairs of blocks sharing B by multicast; 300 rows make 3 M tiles of 128, so the
    last pair's second block computes rows that do not exist (stores guarded)."""
    t = CudaHopperWsMatmul()
    rng = np.random.default_rng()
    for dtype in ("float16", "bfloat16"):
        for bn in (256, 128):
            params = dict(DEFAULT, cluster=2, block_n=bn)
            assert matmul_error(hopper, t, params, *shapes, dtype, rng) < 1e-2, (params, dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("extra", [{"split": 3, "block_n": 128, "stages": 6}, {"split": 8, "block_n": 64, "stages": 8},
                                   {"epilogue": 0}, {"m_tiles": 2, "block_n": 128}], ids=str)
def test_split_k_and_epilogues_match_float64_reference(hopper, matmul_error, extra):
    """K slices (the last one shorter: 1000 = 16 k-tiles in 3 slices of 6, 6, 4) with
    the reduce launch, the direct epilogue, and the staged one with two M tiles a warp."""
    t = CudaHopperWsMatmul()
    rng = np.random.default_rng()
    params = dict(DEFAULT, **extra)
    for shapes, dtype in ((((127, 1000), (1000, 264)), "bfloat16"), (((3, 61, 520), (1, 520, 136)), "float16"),
                          (((1, 24), (24, 8)), "bfloat16")):
        assert matmul_error(hopper, t, params, *shapes, dtype, rng) < 1e-2, (params, shapes, dtype)


@pytest.mark.cuda
def test_graph_launch_plan_reencodes_maps_for_new_buffers(hopper):
    """A LaunchPlan in CUDA-graph update mode bound to new input buffers (the zero-copy
    call path) must re-encode the tensor maps, or it reads the old buffers."""
    from hidet_framework.runtime.compiled_task import compile_scheduled
    from hidet_plugin_cuda.cuda_graph import LaunchPlan
    from hidet_plugin_cuda.memory import DeviceArray

    backend, target, torch = hopper
    t = CudaHopperWsMatmul()
    task, attrs = matmul_task((200, 136), (136, 264), "float16")
    compiled = compile_scheduled(task, t.build(task, attrs, t.space(target, 0)[0], target), backend, target)
    make = lambda shape: torch.randn(shape, device="cuda", dtype=torch.float16)  # noqa: E731
    a0, b0, a1, b1 = make((200, 136)), make((136, 264)), make((200, 136)), make((136, 264))
    c = torch.full((200, 264), float("nan"), device="cuda", dtype=torch.float16)
    arrays = [DeviceArray.from_dlpack(x) for x in (a0, b0, c)]
    launches = compiled.bind(arrays[:2], arrays[2:], compiled.allocate_workspace())
    plan = LaunchPlan(launches, [[(0, 0)], [(0, 1)], [(0, 2)]], [0, 0, 0], 2, "update")
    for a, b in ((a0, b0), (a1, b1), (a0, b1)):
        c.fill_(float("nan"))
        plan.run([a.data_ptr(), b.data_ptr(), c.data_ptr()], torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
        got = c.double().cpu().numpy()
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(128, 768, 3072), (200, 264, 136)], ids=str)
def test_level0_fused_bias_relu_on_the_gpu(hopper, shape, monkeypatch):
    """A compiled graph at space 0 with the opt-in model: it picks this template
    (checked), and the bias + relu consumers are grafted onto its staged epilogue's
    element stores. Shapes where the opt-in model picks this template (for 128x3072x768,
    m x k x n, it picks the tensor-core template: checked on the H200 in session 7)."""
    import os

    import hidet_framework as hf
    from hidet_framework.extension import plugin_host
    from hidet_framework.tuner import candidates_of

    monkeypatch.setenv("HIDET_FRAMEWORK_HOPPER_WS_MODEL", "1")
    m, k, n = shape
    task, attrs = matmul_task((m, k), (k, n), "float16")
    templates = [t for t in plugin_host().templates.templates_for("matmul", "cuda") if t.applies(task, attrs)]
    assert candidates_of(templates, hopper[1], 0, task, attrs)[0].template.name == "matmul.cuda_hopper_ws"
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    xv = rng.standard_normal((m, k)).astype(np.float16)
    wv = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    bv = rng.standard_normal(n).astype(np.float16)
    x = hf.symbol((m, k), "float16")
    y = hf.ops.relu(hf.ops.add(hf.ops.matmul(x, hf.constant(wv)), hf.constant(bv)))
    fn = hf.compile(hf.trace(y, inputs=[x]), target="cuda", space=0)
    got = np.asarray(fn(xv), dtype=np.float64)
    mm = (xv.astype(np.float64) @ wv.astype(np.float64)).astype(np.float16).astype(np.float64)
    want = np.maximum(mm + bv.astype(np.float64), 0)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2
