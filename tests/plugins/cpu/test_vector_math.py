"""Vectorized float32 math on the CPU (libmvec through ``omp declare simd``, see
hidet_plugin_cpu/vector_math.py): the loops really call the SIMD variants, and every
function stays within its stated ULP bound of the float64 result over the whole float
range — every binade from the smallest denormal to the largest finite float, both
signs — and gives the IEEE answer for NaN, infinities, zeros and overflow.

Kernels run on arrays of a prime length, so vectorized lanes and the scalar tail loop
(libm) are both checked, with poisoned (NaN) outputs.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from hidet_framework.ir.math_functions import cos, erf, exp, log, pow_, sin, tanh
from hidet_framework.lang import attrs, f32, i32, parallel, script, script_module
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_cpu import vector_math
from hidet_plugin_cpu.codegen import generate

FLOAT32_TINY = 2.0 ** -149  # the smallest denormal: the ULP of every denormal


def float_range_sample(rng, per_binade=48):
    """Every binade of float32 (denormals as one), both signs, random mantissas, plus
    the special values."""
    mantissas = rng.integers(0, 1 << 23, size=(254, per_binade), dtype=np.uint32)
    exponents = np.arange(1, 255, dtype=np.uint32)[:, None] << 23
    normals = (exponents | mantissas).ravel()
    denormals = rng.integers(1, 1 << 23, size=per_binade * 4, dtype=np.uint32)
    bits = np.concatenate([normals, denormals])
    values = bits.view(np.float32)
    special = np.array([0.0, np.inf, np.nan, np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                        FLOAT32_TINY, 1.0, 0.5, 88.72, 88.73, -103.9, -104.0, 1e-30, 3.14159265], np.float32)
    return np.concatenate([values, -values, special, -special]).astype(np.float32)


def ulp_error(got, want):
    """|got - want| in ULPs of float32 at the float64 reference (denormal ULP floor);
    0 where both are the same infinity or both NaN; inf where one is NaN or an
    infinity and the other is not."""
    got64 = got.astype(np.float64)
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32)  # the float range the result must land in
        scale = np.maximum(np.abs(np.spacing(np.abs(want32))).astype(np.float64), FLOAT32_TINY)
        err = np.abs(got64 - want) / scale
    both_nan = np.isnan(got64) & np.isnan(want)
    same_inf = np.isinf(got64) & np.isinf(want32) & (np.sign(got64) == np.sign(want))
    # a finite result past float32's range is right only as the infinity it rounds to
    err = np.where(np.isinf(want32) & ~np.isinf(want) & ~same_inf, np.inf, err)
    err = np.where(both_nan | same_inf, 0.0, err)
    return np.where(np.isnan(err), np.inf, err)


@script
def exp_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = exp(a[i])


@script
def log_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = log(a[i])


@script
def erf_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = erf(a[i])


@script
def tanh_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = tanh(a[i])


@script
def sin_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = sin(a[i])


@script
def cos_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = cos(a[i])


@script
def pow_k(n: i32, a: f32[n], b: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = pow_(a[i], b[i])


_erf64 = np.vectorize(math.erf, otypes=[np.float64])
UNARY = {"exp": (exp_k, np.exp), "log": (log_k, np.log), "erf": (erf_k, _erf64), "tanh": (tanh_k, np.tanh),
         "sin": (sin_k, np.sin), "cos": (cos_k, np.cos)}
KERNELS = [k for k, _ in UNARY.values()] + [pow_k]


@pytest.fixture(scope="module")
def math_library(cpu_backend):
    module = lower(script_module(*KERNELS, name="vector_math_accuracy"), "cpu")
    return generate(module), cpu_backend.compile(module)


def _prime_length(values):
    n = len(values)
    while any(n % p == 0 for p in range(2, int(n ** 0.5) + 1)):
        n += 1
    return np.resize(values, n)


def test_loops_call_the_simd_variants(math_library):
    source, _ = math_library
    names = vector_math.available_vector_functions()
    if not names:
        pytest.skip("no libmvec on this machine: calls stay scalar libm")
    for name in ("expf", "logf", "powf", "sinf", "cosf"):
        assert name in names  # glibc >= 2.22 on x86-64 has these
        assert f"#pragma omp declare simd notinbranch\nextern float {name}(" in source
    # the built library imports libmvec's SIMD entry points (_ZGV<isa>N<lanes>v_expf):
    # the loops were vectorized, not left scalar
    with open(math_library[1].path, "rb") as f:
        image = f.read()
    for name in ("expf", "logf", "sinf", "cosf", "powf"):
        assert b"v_" + name.encode() + b"\0" in image, name


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ulp_bound_over_the_float_range(name, math_library, rng):
    _, library = math_library
    kernel, reference = UNARY[name]
    a = _prime_length(float_range_sample(rng))
    c = np.full_like(a, np.nan)
    library[kernel.name](len(a), a, c)
    with np.errstate(all="ignore"):
        want = reference(a.astype(np.float64))
    err = ulp_error(c, want)
    worst = int(np.argmax(err))
    bound = vector_math.ULP_BOUNDS[name]
    assert err[worst] <= bound, (f"{name}({a[worst]!r}) = {c[worst]!r}, float64 says {want[worst]!r}: "
                                 f"{err[worst]:.3g} ULP > {bound}")


def test_pow_ulp_bound(math_library, rng):
    _, library = math_library
    x = np.abs(float_range_sample(rng, per_binade=8))
    x = np.concatenate([x, -np.array([1.0, 2.0, 0.5, 3.0, np.inf, 0.0], np.float32)])
    y = np.concatenate([rng.uniform(-4, 4, len(x) // 2), rng.integers(-5, 6, len(x) - len(x) // 2)])
    y = np.concatenate([y, [0.5, 2.0, 3.0, -1.0, np.nan, 0.0]])[:len(x)].astype(np.float32)
    x, y = _prime_length(x), _prime_length(y)
    c = np.full_like(x, np.nan)
    library["pow_k"](len(x), x, y, c)
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64))
    err = ulp_error(c, want)
    worst = int(np.argmax(err))
    assert err[worst] <= vector_math.ULP_BOUNDS["pow"], f"pow({x[worst]!r}, {y[worst]!r}) = {c[worst]!r} vs {want[worst]!r}"


def test_declarations_and_link_flags():
    assert vector_math.declarations(("expf", "pow")) == [
        "#pragma omp declare simd notinbranch", "extern float expf(float);",
        "#pragma omp declare simd notinbranch", "extern double pow(double, double);"]
    assert vector_math.link_flags(()) == ()
    assert vector_math.link_flags(("expf",)) == ("-lmvec",)


def test_activations_through_compiled_graphs(cpu_backend, rng):
    """sigmoid, gelu (erf and tanh forms) as the ops plugin defines them, compiled by
    hf.compile: vectorized (the library imports libmvec) and within float32 rounding
    of float64 (absolute where 1 + erf or 1 + tanh cancels, as in any float32 code)."""
    import hidet_framework as hf

    x = hf.symbol((100_003,), "float32")
    a = rng.uniform(-12.0, 12.0, x.shape).astype(np.float32)
    a[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 88.0]
    x64 = a.astype(np.float64)
    erf64 = _erf64(x64 / np.sqrt(2.0))
    with np.errstate(all="ignore"):
        tanh64 = np.tanh(np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64 ** 3))
        cases = {"sigmoid": (hf.ops.sigmoid(x), 1.0 / (1.0 + np.exp(-x64))),
                 "gelu": (hf.ops.gelu(x), 0.5 * x64 * (1.0 + erf64)),
                 "gelu_tanh": (hf.ops.gelu(x, approximate="tanh"), 0.5 * x64 * (1.0 + tanh64))}
    for name, (y, want) in cases.items():
        fn = hf.compile(hf.trace(y, inputs=[x]), target="cpu", space=0)
        got = np.asarray(fn(a)).astype(np.float64)
        finite = np.isfinite(want)
        assert np.array_equal(np.isnan(got), np.isnan(want)), name
        assert np.array_equal(got[~finite], want[~finite], equal_nan=True), name
        err = np.abs(got[finite] - want[finite]) - 4e-7 * np.abs(want[finite])
        assert err.max() <= 2e-6, f"{name}: {err.max():.3g}"
