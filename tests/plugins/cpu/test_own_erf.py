"""The float32 erf of our own (``hidet_erff``, hidet_plugin_cpu/vector_math.py).

Built in a real kernel (vectorized lanes and the scalar tail of a prime-length loop)
and checked against float64 ``math.erf``: its stated ULP bound over every binade of
the float range, both signs, denormals; the IEEE special values exactly; and that a
source calls it only where erf is used (other generated sources keep their bytes).
The AVX2 build (gcc told ``-mno-avx512f``) is checked too: gcc makes a different
SIMD clone there.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from hidet_framework.ir.math_functions import erf, exp
from hidet_framework.lang import attrs, f32, i32, parallel, script, script_module
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_cpu import vector_math
from hidet_plugin_cpu.codegen import generate

from .test_vector_math import _prime_length, float_range_sample, ulp_error


@script
def own_erf_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = erf(a[i])


@script
def no_erf_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = exp(a[i])


_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def _build(cpu_backend, isa, monkeypatch):
    if isa == "avx2":
        from hidet_plugin_cpu import build

        monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
    module = lower(script_module(own_erf_k, name=f"own_erf_{isa}"), "cpu")
    return generate(module), cpu_backend.compile(module)


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_ulp_bound_and_special_values(cpu_backend, rng, isa, monkeypatch):
    source, library = _build(cpu_backend, isa, monkeypatch)
    assert "static inline float hidet_erff(float x)" in source and "hidet_erff(a[" in source
    a = _prime_length(np.concatenate([float_range_sample(rng),
                                      rng.uniform(-4.5, 4.5, 200_000).astype(np.float32),   # where erf bends
                                      np.linspace(3.0, 4.0, 50_001, dtype=np.float32)]))     # the worst region
    c = np.full_like(a, np.nan)
    library["own_erf_k"](len(a), a, c)
    want = _erf64(a.astype(np.float64))
    err = ulp_error(c, want)
    worst = int(np.argmax(err))
    bound = vector_math.ULP_BOUNDS["erf"]
    assert err[worst] <= bound, f"erf({a[worst]!r}) = {c[worst]!r}, float64 says {want[worst]!r}: {err[worst]:.3g} ULP"
    assert np.mean(err[np.isfinite(err)]) < 1.0          # typical results are within rounding
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0 ** -149, -(2.0 ** -149), 1e-30, 3.92, 1e30, -1e30],
                       np.float32)
    out = np.full_like(special, 7.0)
    library["own_erf_k"](len(special), special, out)
    assert np.isnan(out[0])
    assert out[1] == 1.0 and out[2] == -1.0 and out[8] == 1.0 and out[9] == 1.0 and out[10] == -1.0
    assert out[3] == 0.0 and not np.signbit(out[3]) and out[4] == 0.0 and np.signbit(out[4])
    assert out[5] == np.float32(2.0 ** -149) and out[6] == -out[5]       # 2x/sqrt(pi) rounds to the denormal
    assert abs(out[7] - np.float32(2e-30 / math.sqrt(math.pi))) <= np.spacing(np.float32(1.1e-30))


def test_definition_only_where_erf_is_called():
    with_erf = generate(lower(script_module(own_erf_k, name="with_erf"), "cpu"))
    without = generate(lower(script_module(no_erf_k, name="without_erf"), "cpu"))
    assert with_erf.count("static inline float hidet_erff(float x)") == 1
    assert "hidet_erff" not in without and "hidet_erf(" not in without
    assert vector_math.place_own_functions(without) == without
    # placed before the prototypes, after the includes it needs
    assert with_erf.index("#include <math.h>") < with_erf.index("hidet_erff(float x)") < with_erf.index(
        "/* prototypes */")


def test_coefficients_are_what_the_docstring_describes():
    """P(0) = 2/sqrt(pi) (erf'(0)), Q(0) = 1; every coefficient positive (Horner adds
    no cancellation for t^2 >= 0)."""
    p = [float(c.rstrip("f")) for c in vector_math.ERF_P]
    q = [float(c.rstrip("f")) for c in vector_math.ERF_Q]
    assert abs(p[0] - 2 / math.sqrt(math.pi)) < 1e-7 and q[0] == 1.0
    assert min(p) > 0 and min(q) > 0 and len(p) == len(q) == 6
