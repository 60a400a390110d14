"""The AMX variant of the bfloat16 matmul (cpu_amx_tiles.py, issue 15).

Two kinds of tests:

- compile-only and selection (every x86-64 machine): targets are made, not detected, so
  the AMX kernel is generated and built by gcc here even where the CPU has no AMX
  (gas assembles tile instructions whatever -march says); it is never run here.
- runs, only where the detected target has amx_tile and amx_bf16 (which it reports only
  when Linux granted the tile permission; skipped elsewhere, with the reason): fresh
  random bfloat16 inputs, odd and prime sizes (tails of M and N below 16, K below 32),
  batched B, several K blocks, the output poisoned with NaN, against float64 numpy of
  the bfloat16-rounded inputs with the bound of test_cpu_half_operands.py (float32
  accumulation of K products plus one bfloat16 rounding of C).
"""
from __future__ import annotations

import platform
import shutil
import subprocess

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_matmul.cpu_template import CpuPackedMatmul
from hidet_plugin_matmul.operators import matmul_task

from .test_cpu_half_operands import _assert_within_bound, _gelu, _half, _poisoned, _value, rng  # noqa: F401 (fixture)

PACKED = CpuPackedMatmul()
BASE = {"cores": 2, "l1d_bytes": 48 << 10, "l2_bytes": 2 << 20, "model": "made"}
ZEN4_FLAGS = ("avx2", "avx512f", "avx512_bf16", "fma")
SPR = Target("cpu", "x86-64", {**BASE, "vector_bits": 512, "flags": ZEN4_FLAGS + ("amx_bf16", "amx_tile")})
ZEN4 = Target("cpu", "x86-64", {**BASE, "vector_bits": 512, "flags": ZEN4_FLAGS})
# what hidet_plugin_cpu.target makes of SPR under HIDET_FRAMEWORK_CPU_ISA=avx2
FORCED_AVX2 = Target("cpu", "x86-64", {**BASE, "vector_bits": 256, "flags": ("avx2", "fma")})
TILE_CALL, PAIR_CALL = "tdpbf16ps", "vdpbf16ps"
x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="AMX is x86-64 only")


def _source(target: Target, dtype: str = "bfloat16", shape=((97, 257), (257, 31)), params=None) -> str:
    from hidet_framework.transforms.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    task, attributes = matmul_task(*shape, dtype)
    params = PACKED.space(target, 0)[0] if params is None else params
    return generate(lower(PACKED.build(task, attributes, params, target).module, "cpu"), target)


def test_selection_from_the_target_flags():
    """AMX flags (both) -> the tile kernel; avx512_bf16 only, or amx_tile without
    amx_bf16 -> the vdpbf16ps pair kernel; forced AVX2 or float16 -> neither."""
    spr = _source(SPR)
    assert TILE_CALL in spr and "ldtilecfg" in spr and "tilerelease" in spr and PAIR_CALL not in spr
    for t in (ZEN4, Target("cpu", "x86-64", {**ZEN4.properties, "flags": ZEN4_FLAGS + ("amx_tile",)})):
        src = _source(t)
        assert TILE_CALL not in src.replace(PAIR_CALL, "") and "dpbf16ps" in src
    for src in (_source(FORCED_AVX2), _source(SPR, "float16"), _source(SPR, "float32")):
        assert "dpbf16ps" not in src and "tmm" not in src
    block = dict(PACKED.space(SPR, 0)[0], bpack="block")     # the other loop order stays widening
    assert "tmm" not in _source(SPR, params=block)


@x86
@pytest.mark.parametrize("shape,kc", [(((1, 1), (1, 1)), None), (((97, 257), (257, 31)), None),
                                      (((3, 31, 7), (7, 257)), None), (((2, 13, 9), (2, 9, 33)), None),
                                      (((97, 257), (257, 31)), 64)], ids=str)
def test_amx_kernel_compiles_here(cpu_backend, shape, kc):
    """The tile kernel of a made AMX target (one K block and several: kc=64 over K=257)
    is generated and gcc builds it into a shared library with the project's flags, on
    this machine whatever its CPU; where objdump exists, the library holds the tile
    instructions with A in tmm4/5, B in tmm6/7, C in tmm0-3."""
    from hidet_plugin_cpu.build import build_shared_library

    params = PACKED.space(SPR, 0)[0]
    params = params if kc is None else dict(params, kc=kc)
    source = _source(SPR, shape=shape, params=params)
    # C tiles reloaded from the partial sums only with several K blocks
    assert ("%%tmm0\" : : \"r\"(&cpart[part]" in source) == (kc is not None)
    path, _ = build_shared_library(source, name="amx_compile_only")
    if shutil.which("objdump"):
        dis = subprocess.run(["objdump", "-d", path], capture_output=True, text=True, check=True).stdout
        for insn in ("ldtilecfg", "tilerelease", "tilezero %tmm0", "tileloadd", "tilestored %tmm3",
                     "tdpbf16ps %tmm6,%tmm4,%tmm0", "tdpbf16ps %tmm7,%tmm4,%tmm1",
                     "tdpbf16ps %tmm6,%tmm5,%tmm2", "tdpbf16ps %tmm7,%tmm5,%tmm3"):
            assert insn in dis, insn


@x86
@pytest.mark.parametrize("shape,update", [(((7, 31), (31, 97)), {}), (((97, 257), (257, 31)), {"kc": 32, "mc": 32}),
                                          (((2, 13, 9), (2, 9, 33)), {"order": "b_in_l1"})], ids=str)
def test_amx_kernel_emulated_here(cpu_backend, shape, update, tmp_path):
    """The generated C with each tile instruction replaced by a C emulation of its
    documented semantics (scripts/amx_emulate.py) runs here within the bound: the
    packing, tile strides and offsets, K blocks and stores, not the instructions."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "amx_emulate.py"
    spec = importlib.util.spec_from_file_location("amx_emulate", path)
    emulate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulate)
    assert emulate.run(*shape, update, np.random.default_rng(), str(tmp_path)) <= 1.0


def test_detected_target_reports_amx_only_when_permitted():
    """The detected flags have amx only where this process holds the tile permission."""
    from hidet_plugin_cpu.target import amx_permission, detect_cpu_target

    flags = set(detect_cpu_target().get("flags", ()))
    if any(f.startswith("amx") for f in flags):
        assert amx_permission()


@pytest.fixture
def amx(cpu_backend):
    target = cpu_backend.detect_target()
    flags = set(target.get("flags", ()))
    if not {"amx_tile", "amx_bf16"} <= flags:
        pytest.skip("this machine has no AMX (amx_tile + amx_bf16) or Linux refused the tile permission: "
                    f"{target.get('model')}")
    return cpu_backend, target


SHAPES = [((1, 1), (1, 1)), ((7, 31), (31, 97)), ((257, 97), (97, 31)), ((31, 257), (257, 7)),
          ((3, 31, 7), (7, 257)), ((2, 13, 9), (2, 9, 33)), ((2, 97, 33), (2, 33, 1))]


@pytest.mark.parametrize("a_shape,b_shape", SHAPES, ids=str)
def test_amx_runs_against_float64(amx, rng, a_shape, b_shape):
    """The default candidate, the other loop order (b_in_l1), several K blocks with
    partial sums and several M blocks (kc=32, mc=32), and one worker."""
    backend, target = amx
    default = PACKED.space(target, 0)[0]
    task, attributes = matmul_task(a_shape, b_shape, "bfloat16")
    a = _half(rng.standard_normal(a_shape), "bfloat16")
    b = _half(rng.standard_normal(b_shape), "bfloat16")
    for params in (default, dict(default, order="b_in_l1"), dict(default, kc=32, mc=32, nsub=32),
                   dict(default, workers=1)):
        assert TILE_CALL in _source(target, shape=(a_shape, b_shape), params=params)   # the tile kernel runs
        scheduled = PACKED.build(task, attributes, params, target)
        compiled = compile_scheduled(task, scheduled, backend, target)
        c = _poisoned(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1]), "bfloat16")
        compiled.run([a, b], [c])
        _assert_within_bound(c, _value(a, "bfloat16"), _value(b, "bfloat16"), "bfloat16",
                             f"{a_shape} x {b_shape} {params}")


def test_amx_flushes_denormal_products(amx, rng):
    """Products of 2^-64 x 2^-64 (below float32's normals) are flushed to zero (the
    documented numerics of tdpbf16ps), normal columns within the bound."""
    backend, target = amx
    k, n = 4, 37
    a, b = rng.standard_normal((3, k)), rng.standard_normal((k, n))
    a[0], b[:, 0] = 2.0 ** -64, 2.0 ** -64
    a_h, b_h = _half(a, "bfloat16"), _half(b, "bfloat16")
    task, attributes = matmul_task((3, k), (k, n), "bfloat16")
    compiled = compile_scheduled(task, PACKED.build(task, attributes, PACKED.space(target, 0)[0], target),
                                 backend, target)
    c = _poisoned((3, n), "bfloat16")
    compiled.run([a_h, b_h], [c])
    assert _value(c, "bfloat16")[0, 0] == 0.0
    a_h[0], b_h[:, 0] = _half(np.ones(k), "bfloat16"), _half(np.ones(k), "bfloat16")
    c = _poisoned((3, n), "bfloat16")
    compiled.run([a_h, b_h], [c])
    _assert_within_bound(c, _value(a_h, "bfloat16"), _value(b_h, "bfloat16"), "bfloat16", "normal")


@pytest.mark.parametrize("m,k,n", [(97, 31, 257), (33, 257, 97)])
def test_amx_through_compile_with_bias_gelu(amx, rng, m, k, n):
    """hf.compile(dtype="bfloat16") of gelu(x @ W + bias): the packed template built as
    the tile kernel, bias and gelu fused; the bound of test_cpu_half_operands.py."""
    from hidet_framework.transforms.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    _, target = amx
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    x = hf.symbol((m, k), "float32")
    y = hf.ops.gelu(hf.ops.add(hf.ops.matmul(x, hf.constant(w)), hf.constant(bias)))
    fn = hf.compile(hf.trace(y, inputs=[x]), target="cpu", dtype="bfloat16")
    assert [t.scheduled.source for t in fn.tasks] == ["matmul.cpu_packed"]
    assert TILE_CALL in generate(lower(fn.tasks[0].scheduled.module, "cpu"), target)
    a = _half(rng.standard_normal((m, k)), "bfloat16")
    a64 = _value(a, "bfloat16")
    w64, b64 = (_value(_half(v, "bfloat16"), "bfloat16") for v in (w, bias))
    want = _gelu(a64 @ w64 + b64)
    got = _value(fn(a), "bfloat16")
    bound = 4 * 1.13 * 2.0 ** -8 * (np.abs(a64 @ w64).max() + np.abs(b64).max())
    assert not np.isnan(got).any()
    assert np.abs(got - want).max() <= bound, f"error {np.abs(got - want).max():.3g} > {bound:.3g}"
