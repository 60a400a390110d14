"""bfloat16 and float16 operands in the CPU matmul templates (issue 15): the packed
template and the prepacked GEMV widen half inputs to float32 as they pack, accumulate
in float32 and round C once at the store.

Every run: fresh random inputs, odd and prime sizes, the output poisoned with NaN
first, against float64 numpy computed from the half-rounded inputs, with a per-element
bound that follows from the numerics: float32 accumulation of K products (at most
K * 2^-24 * (|A| @ |B|), taken with a factor of 2) plus one rounding of C to the half
type (half its unit: 2^-8 |c| for bfloat16's 8 significant bits, 2^-11 for float16's
11). A store that truncates instead of rounding, or one rounding too many, exceeds it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.graph.passes.convert_float_dtype import float32_to_bfloat16_bits
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_matmul import cpu_prepack
from hidet_plugin_matmul.cpu_gemv import CpuPrepackedMatmul, gemv_space
from hidet_plugin_matmul.cpu_template import CpuPackedMatmul
from hidet_plugin_matmul.operators import matmul_task

PACKED, GEMV = CpuPackedMatmul(), CpuPrepackedMatmul()
UNIT_ROUNDOFF = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh inputs every run


def _half(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to `dtype`, as the runtime carries it (bfloat16: its uint16 bits)."""
    if dtype == "bfloat16":
        return float32_to_bfloat16_bits(np.asarray(x, np.float32))
    return np.asarray(x).astype(np.float16)


def _value(h: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values of a half array (bfloat16 bits widened exactly)."""
    h = np.asarray(h)
    if dtype == "bfloat16":
        return (h.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return h.astype(np.float64)


def _poisoned(shape: tuple, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return np.full(shape, 0x7FC0, np.uint16)   # a quiet NaN
    return np.full(shape, np.nan, np.float16)


def _assert_within_bound(got: np.ndarray, a64: np.ndarray, b64: np.ndarray, dtype: str, what: str) -> None:
    c = _value(got, dtype)
    assert not np.isnan(c).any(), f"{what}: an output element was never written"
    ref = np.matmul(a64, b64)
    k = a64.shape[-1]
    bound = UNIT_ROUNDOFF[dtype] * np.abs(ref) + 2 * k * 2.0 ** -24 * np.matmul(np.abs(a64), np.abs(b64)) + 1e-30
    worst = np.max(np.abs(c - ref) / bound)
    assert worst <= 1.0, f"{what}: error {worst:.3g} x the bound"


def _avx2(target: Target, monkeypatch) -> Target:
    """This machine's target narrowed to AVX2, gcc told -mno-avx512f."""
    from hidet_plugin_cpu import build

    if target.get("vector_bits", 0) < 256:
        pytest.skip("this CPU has no 256-bit vectors")
    monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
    return Target(target.kind, target.arch, dict(target.properties, vector_bits=256))


SHAPES = [((1, 1), (1, 1)), ((7, 31), (31, 97)), ((257, 97), (97, 31)), ((3, 31, 7), (7, 257)),
          ((2, 13, 9), (2, 9, 33))]


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("a_shape,b_shape", SHAPES, ids=str)
def test_packed_template_half_operands(cpu_backend, rng, dtype, isa, a_shape, b_shape, monkeypatch):
    """The default candidate, the ``bpack="block"`` order and small K blocks (partial
    sums over K blocks, 4 at K=97) on 1, prime and batched shapes."""
    target = cpu_backend.detect_target()
    if isa == "avx2":
        target = _avx2(target, monkeypatch)
    default = PACKED.space(target, 0)[0]
    kblocked = dict(default, kc=32, mc=2 * default["mr"], nsub=default["nr"])
    if True:
        task, attributes = matmul_task(a_shape, b_shape, dtype)
        assert PACKED.applies(task, attributes)
        a = _half(rng.standard_normal(a_shape), dtype)
        b = _half(rng.standard_normal(b_shape), dtype)
        for params in (default, dict(default, bpack="block"), kblocked):
            scheduled = PACKED.build(task, attributes, params, target)
            compiled = compile_scheduled(task, scheduled, cpu_backend, target)
            c = _poisoned(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1]), dtype)
            compiled.run([a, b], [c])
            _assert_within_bound(c, _value(a, dtype), _value(b, dtype), dtype, f"{a_shape} x {b_shape} {params}")


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gemv_template_half_a_and_c(cpu_backend, rng, dtype, isa, monkeypatch):
    """The prepacked kernel with a half A and C and float32 panels (what `pack_b` makes
    of half weights): one K block and several, several rows blocks, one worker."""
    target = cpu_backend.detect_target()
    if isa == "avx2":
        target = _avx2(target, monkeypatch)
    nr = cpu_prepack.panel_width(target)
    for m, k, n in ((1, 97, 257), (7, 257, 31)):
        an = hf.symbol((m, k), dtype)
        y = cpu_prepack.matmul_prepacked(an, cpu_prepack.pack_b(hf.symbol((k, n), dtype), nr), n)
        task, attributes = y.producer.task, dict(y.producer.attributes)
        assert [t.dtype.name for t in task.inputs] == [dtype, "float32"] and GEMV.applies(task, attributes)
        a = _half(rng.standard_normal((m, k)), dtype)
        b64 = _value(_half(rng.standard_normal((k, n)), dtype), dtype)
        panels = np.zeros((k, -(-n // nr) * nr), np.float32)
        panels[:, :n] = b64
        panels = np.ascontiguousarray(panels.reshape(k, -1, nr).transpose(1, 0, 2))
        space = gemv_space(target, 0, nr)
        for params in (space[0], dict(space[0], kc=16, mr=3), dict(space[0], workers=1)):
            compiled = compile_scheduled(task, GEMV.build(task, attributes, params, target), cpu_backend, target)
            c = _poisoned((m, n), dtype)
            compiled.run([a, panels], [c])
            _assert_within_bound(c, _value(a, dtype), b64, dtype, f"{(m, k, n)} {params}")


def _kernel_source(target: Target, dtype: str, shape=((7, 31), (31, 97))) -> str:
    from hidet_framework.transforms.pipeline import lower
    from hidet_plugin_cpu.codegen import generate

    task, attributes = matmul_task(*shape, dtype)
    return generate(lower(PACKED.build(task, attributes, PACKED.space(target, 0)[0], target).module, "cpu"), target)


def _without(target: Target, *flags: str) -> Target:
    return Target(target.kind, target.arch, dict(target.properties,
                                                 flags=tuple(f for f in target.get("flags", ()) if f not in flags)))


def test_vdpbf16ps_from_the_target_flags_only(cpu_backend):
    """The pair kernel (vdpbf16ps) is built for bfloat16 x bfloat16 exactly when the
    target's flags have avx512_bf16 and its vectors are 512 bits: never for float16 or
    float32, nor for a target without the flag or narrowed to AVX2 (flags kept), on
    whatever machine this runs (the targets are made, not detected)."""
    base = {"cores": 2, "l1d_bytes": 32 << 10, "l2_bytes": 1 << 20, "model": "made"}
    zen4 = Target("cpu", "x86-64", {**base, "vector_bits": 512, "flags": ("avx2", "avx512f", "avx512_bf16", "fma")})
    pair_call = "dpbf16ps"
    assert pair_call in _kernel_source(zen4, "bfloat16")
    assert pair_call not in _kernel_source(zen4, "float16")
    assert pair_call not in _kernel_source(zen4, "float32")
    assert pair_call not in _kernel_source(_without(zen4, "avx512_bf16"), "bfloat16")
    assert pair_call not in _kernel_source(Target("cpu", "x86-64", {**zen4.properties, "vector_bits": 256}), "bfloat16")


def test_vdpbf16ps_flushes_denormal_products(cpu_backend, rng):
    """Where this machine has avx512_bf16: products below float32's smallest normal
    (2^-64 * 2^-64 = 2^-128) are flushed to zero by vdpbf16ps (the documented numerics)
    and kept by the widening kernel, and normal columns agree with float64 (the bound)."""
    target = cpu_backend.detect_target()
    if "avx512_bf16" not in target.get("flags", ()) or target.get("vector_bits", 0) < 512:
        pytest.skip("no avx512_bf16 on this machine")
    k, n = 4, 37
    a = rng.standard_normal((3, k))
    b = rng.standard_normal((k, n))
    a[0], b[:, 0] = 2.0 ** -64, 2.0 ** -64      # row 0 x column 0: four products of 2^-128
    a_h, b_h = _half(a, "bfloat16"), _half(b, "bfloat16")
    task, attributes = matmul_task((3, k), (k, n), "bfloat16")
    got = {}
    # without the amx flags: on an AMX machine the tile kernel (which flushes too) would be built for both
    no_amx = _without(target, "amx_tile", "amx_bf16")
    for name, t in (("pairs", no_amx), ("widened", _without(no_amx, "avx512_bf16"))):
        compiled = compile_scheduled(task, PACKED.build(task, attributes, PACKED.space(t, 0)[0], t), cpu_backend, t)
        c = _poisoned((3, n), "bfloat16")
        compiled.run([a_h, b_h], [c])
        got[name] = _value(c, "bfloat16")
        normal = np.ones((3, n), bool)
        normal[0, 0] = False
        a64, b64 = _value(a_h, "bfloat16"), _value(b_h, "bfloat16")
        bound = UNIT_ROUNDOFF["bfloat16"] * np.abs(a64 @ b64) + 2 * k * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64))
        assert np.all(np.abs(got[name] - a64 @ b64)[normal] <= bound[normal]), name
    assert got["pairs"][0, 0] == 0.0
    assert got["widened"][0, 0] == 4 * 2.0 ** -128


def _gelu(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


@pytest.mark.parametrize("m,k,n,source,prologue", [(97, 31, 257, "matmul.cpu_packed", False),
                                                    (7, 257, 131, "matmul.cpu_gemv", False),
                                                    (97, 31, 257, "matmul.cpu_packed", True)])
def test_compile_picks_the_template_and_fuses_bias_gelu(rng, m, k, n, source, prologue):
    """hf.compile(dtype="bfloat16") of gelu(x @ W + bias) (and of relu(x) @ W: a
    prologue grafted onto the packing of A): the CPU templates (not the auto-scheduler)
    serve the half matmul, constant weights prepacked for a short M, the neighbours
    fused. Bound: the matmul's own (above) then one bfloat16 rounding of the matmul's
    output, the add's and the gelu's (|gelu'| < 1.13), relative to the largest output;
    the reference is computed from the bfloat16-rounded operands (relu is exact)."""
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    x = hf.symbol((m, k), "float32")
    y = hf.ops.gelu(hf.ops.add(hf.ops.matmul(hf.ops.relu(x) if prologue else x, hf.constant(w)),
                               hf.constant(bias)))
    fn = hf.compile(hf.trace(y, inputs=[x]), target="cpu", dtype="bfloat16")
    assert [t.scheduled.source for t in fn.tasks] == [source]
    assert [op.name for op in fn.graph.nodes] == ["fused"]
    a = _half(rng.standard_normal((m, k)), "bfloat16")
    a64 = _value(a, "bfloat16")
    w64, b64 = (_value(_half(v, "bfloat16"), "bfloat16") for v in (w, bias))
    a64 = np.maximum(a64, 0.0) if prologue else a64
    want = _gelu(a64 @ w64 + b64)
    got = _value(fn(a), "bfloat16")
    scale = np.abs(a64 @ w64).max() + np.abs(b64).max()
    bound = 4 * 1.13 * 2.0 ** -8 * scale
    assert not np.isnan(got).any()
    assert np.abs(got - want).max() <= bound, f"error {np.abs(got - want).max():.3g} > {bound:.3g}"
