"""The wgmma (sm_90a) matmul template and the Hopper primitives it is written with.

Offline: the space exists on sm_90 only and is bounded; the template applies to 16-byte
aligned rows only; the primitives refuse what PTX does not have; the source holds the
instructions and builds for sm_90a. On the GPU (marker ``cuda``): every space-2
candidate and the default on shapes with edges in M, N and K (batched and broadcast
operands included) against a float64 reference, outputs poisoned first.
(Every candidate also compiles in test_cuda_templates' compile-only test.)
"""
from __future__ import annotations

import numpy as np
import pytest

from hidet_plugin_matmul.cuda_wgmma import CudaWgmmaMatmul
from hidet_plugin_matmul.operators import matmul_task

from .sm90 import sm90_target


def test_space_is_hopper_only_bounded_and_default_first():
    t = CudaWgmmaMatmul()
    assert t.space(sm90_target("sm_80"), 2) == [] and t.space(sm90_target("sm_100"), 1) == []
    s0, s1, s2 = (t.space(sm90_target(), level) for level in (0, 1, 2))
    assert len(s0) == 1 and 1 < len(s1) <= 30 and len(s1) <= len(s2) <= 200
    assert s0[0] == s1[0] == s2[0]
    assert s0[0] == {"auto": 1}  # the cost model's pick (tests/plugins/matmul/test_cuda_defaults.py)
    for p in s2[1:]:  # at most 128 fp32 accumulators a thread, shared memory within the opt-in limit
        assert p["m_tiles"] * p["block_n"] // 2 <= 128
        assert p["stages"] * (64 * p["warpgroups"] * p["m_tiles"] + p["block_n"]) * 64 * 2 <= 227 * 1024


def test_applies_to_half_types_with_aligned_rows_only():
    t = CudaWgmmaMatmul()
    for a, b, dtype, ok in [((64, 64), (64, 64), "float16", True), ((7, 24), (24, 16), "bfloat16", True),
                            ((64, 63), (63, 64), "float16", False), ((64, 64), (64, 60), "float16", False),
                            ((64, 64), (64, 64), "float32", False)]:
        task, attrs = matmul_task(a, b, dtype)
        assert t.applies(task, attrs) is ok, (a, b, dtype)
    task, attrs = matmul_task((64, 63), (63, 64), "float16")
    with pytest.raises(ValueError, match="16-byte aligned"):
        t.build(task, attrs, t.space(sm90_target(), 0)[0], sm90_target())


def test_primitives_refuse_what_ptx_does_not_have():
    from hidet_plugin_cuda import hopper

    with pytest.raises(ValueError, match="swizzle"):
        hopper.wgmma_operand(None, 16, 1024, swizzle_bytes=16)
    with pytest.raises(ValueError, match="multiple of 16"):
        hopper.wgmma_operand(None, 24, 1024)
    with pytest.raises(TypeError):
        hopper.wgmma_wait_group(-1)
    op = hopper.WgmmaOperand(low=None, high=0)
    with pytest.raises(ValueError, match="multiple of 8"):
        hopper.wgmma_mma_async([], op, op, 12)
    with pytest.raises(ValueError, match="supports"):
        hopper.wgmma_mma_async([], op, op, 128, dtype="float32")


@pytest.mark.nvcc
def test_source_uses_wgmma_and_builds_for_sm90a():
    from hidet_plugin_cuda.nvrtc_build import build_cubin, needs_arch_specific
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda import CudaBackend

    def candidate_source(scheduled, target):
        return generate_source(scheduled, CudaBackend(), target)

    try:
        from hidet_plugin_cuda.nvrtc_build import choose_compiler

        choose_compiler()
    except Exception as exc:
        pytest.skip(f"no CUDA compiler: {exc}")
    t = CudaWgmmaMatmul()
    task, attrs = matmul_task((130, 200), (200, 264), "float16")
    source = candidate_source(t.build(task, attrs, t.space(sm90_target(), 0)[0], sm90_target()), sm90_target())
    for text in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "wgmma.fence.sync.aligned",
                 "wgmma.wait_group.sync.aligned 0", "fence.proxy.async.shared::cta", "cp.async.cg.shared.global"):
        assert text in source, text
    assert needs_arch_specific(source)
    assert build_cubin(source, arch="sm_90", name="wgmma_probe").arch == "sm_90a"


# --------------------------------------------------------------------- GPU
SHAPES = [  # edges in M, N and K; K % 64 != 0; batched and broadcast B
    ((1, 8), (8, 8)), ((127, 64), (64, 136)), ((300, 200), (200, 264)), ((130, 1000), (1000, 520)),
    ((3, 33, 24), (3, 24, 40)), ((4, 40, 64), (1, 64, 72)),
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_default_matches_float64_reference(hopper, matmul_error, shapes, dtype):
    t = CudaWgmmaMatmul()
    assert matmul_error(hopper, t, t.space(hopper[1], 0)[0], *shapes, dtype, np.random.default_rng()) < 1e-2


@pytest.mark.cuda
def test_every_space2_candidate_matches_float64_reference(hopper, matmul_error):
    rng = np.random.default_rng()
    t = CudaWgmmaMatmul()
    for params in t.space(hopper[1], 2):
        for shapes in (((300, 200), (200, 264)), ((1100, 136), (136, 520))):  # 1100: raster's last group
            err = matmul_error(hopper, t, params, *shapes, "float16", rng)
            assert err < 1e-2, (params, shapes, err)
