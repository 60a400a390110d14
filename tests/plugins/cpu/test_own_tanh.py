"""The float32 tanh of our own (``hidet_tanhf``, hidet_plugin_cpu/vector_math.py).

Built in a real kernel (vectorized lanes and the scalar tail of a prime-length loop,
poisoned outputs) and checked against float64 ``np.tanh``: its stated ULP bound over
every binade of the float range, both signs, denormals, densely where tanh bends
towards 1; |tanh| never above 1; the IEEE special values exactly; and that a source
carries the definition only where tanh is called. The AVX2 build (gcc told
``-mno-avx512f``) is checked too: gcc makes a different SIMD clone there.
"""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.ir.math_functions import exp, tanh
from hidet_framework.lang import attrs, f32, i32, parallel, script, script_module
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_cpu import vector_math
from hidet_plugin_cpu.codegen import generate

from .test_vector_math import _prime_length, float_range_sample, ulp_error


@script
def own_tanh_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = tanh(a[i])


@script
def no_tanh_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = exp(a[i])


def _build(cpu_backend, isa, monkeypatch):
    if isa == "avx2":
        from hidet_plugin_cpu import build

        monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
    module = lower(script_module(own_tanh_k, name=f"own_tanh_{isa}"), "cpu")
    return generate(module), cpu_backend.compile(module)


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_ulp_bound_and_special_values(cpu_backend, rng, isa, monkeypatch):
    source, library = _build(cpu_backend, isa, monkeypatch)
    assert "static inline float hidet_tanhf(float x)" in source and "hidet_tanhf(a[" in source
    a = _prime_length(np.concatenate([float_range_sample(rng),
                                      rng.uniform(-10.0, 10.0, 200_000).astype(np.float32),   # where tanh bends
                                      np.linspace(7.0, 9.2, 100_003, dtype=np.float32)]))    # the worst region
    c = np.full_like(a, np.nan)
    library["own_tanh_k"](len(a), a, c)
    want = np.tanh(a.astype(np.float64))
    err = ulp_error(c, want)
    worst = int(np.argmax(err))
    bound = vector_math.ULP_BOUNDS["tanh"]
    assert err[worst] <= bound, f"tanh({a[worst]!r}) = {c[worst]!r}, float64 says {want[worst]!r}: {err[worst]:.3g} ULP"
    assert np.mean(err[np.isfinite(err)]) < 1.0          # typical results are within rounding
    assert np.nanmax(np.abs(c)) <= 1.0                    # never 1 + 2^-23 (the clamp on the magnitude)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0 ** -149, -(2.0 ** -149), 1e-30, 9.1, 1e30, -1e30,
                        9.05, -9.05], np.float32)
    out = np.full_like(special, 7.0)
    library["own_tanh_k"](len(special), special, out)
    assert np.isnan(out[0])
    assert out[1] == 1.0 and out[2] == -1.0 and out[8] == 1.0 and out[9] == 1.0 and out[10] == -1.0
    assert out[11] == 1.0 and out[12] == -1.0                                # past 9.01 tanh rounds to 1
    assert out[3] == 0.0 and not np.signbit(out[3]) and out[4] == 0.0 and np.signbit(out[4])
    assert out[5] == np.float32(2.0 ** -149) and out[6] == -out[5]         # tanh(x) = x for tiny x
    assert out[7] == np.float32(1e-30)


def test_definition_only_where_tanh_is_called():
    with_tanh = generate(lower(script_module(own_tanh_k, name="with_tanh"), "cpu"))
    without = generate(lower(script_module(no_tanh_k, name="without_tanh"), "cpu"))
    assert with_tanh.count("static inline float hidet_tanhf(float x)") == 1
    assert "hidet_tanh" not in without and "hidet_erf" not in with_tanh
    assert with_tanh.index("#include <math.h>") < with_tanh.index("hidet_tanhf(float x)") < with_tanh.index(
        "/* prototypes */")


def test_coefficients_are_what_the_docstring_describes():
    """P(0) = Q(0) = 1 (tanh(x) / x -> 1 at 0); every coefficient positive (Horner adds
    no cancellation for t^2 >= 0); the clamp is past 9.01, where tanh rounds to 1."""
    p = [float(c.rstrip("f")) for c in vector_math.TANH_P]
    q = [float(c.rstrip("f")) for c in vector_math.TANH_Q]
    assert p[0] == 1.0 and q[0] == 1.0
    assert min(p) > 0 and min(q) > 0 and len(p) == len(q) == 6
    assert np.float32(np.tanh(9.02)) == 1.0 and "t > 9.1f ? 9.1f : t" in vector_math.OWN_FUNCTIONS["hidet_tanhf"]
