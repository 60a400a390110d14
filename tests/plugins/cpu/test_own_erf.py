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
from hidet_framework.lang import attrs, f32, i32, parallel, script
from hidet_plugin_cpu import vector_math

from .own_math import ISAS, build, check_defined_only_where_called, check_ulp_sweep, coefficients, run


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


@pytest.mark.parametrize("isa", ISAS)
def test_ulp_bound_and_special_values(cpu_backend, rng, isa, monkeypatch):
    source, library = build(own_erf_k, "own_erf", cpu_backend, isa, monkeypatch)
    assert "static inline float hidet_erff(float x)" in source and "hidet_erff(a[" in source
    # where erf bends, and the worst region
    check_ulp_sweep(library, "own_erf_k", "erf", _erf64, rng, bends=4.5, worst=(3.0, 4.0, 50_001))
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0 ** -149, -(2.0 ** -149), 1e-30, 3.92, 1e30, -1e30],
                       np.float32)
    out = run(library, "own_erf_k", special, poison=7.0)
    assert np.isnan(out[0])
    assert out[1] == 1.0 and out[2] == -1.0 and out[8] == 1.0 and out[9] == 1.0 and out[10] == -1.0
    assert out[3] == 0.0 and not np.signbit(out[3]) and out[4] == 0.0 and np.signbit(out[4])
    assert out[5] == np.float32(2.0 ** -149) and out[6] == -out[5]       # 2x/sqrt(pi) rounds to the denormal
    assert abs(out[7] - np.float32(2e-30 / math.sqrt(math.pi))) <= np.spacing(np.float32(1.1e-30))


def test_definition_only_where_erf_is_called():
    _, without = check_defined_only_where_called(own_erf_k, no_erf_k, "static inline float hidet_erff(float x)")
    assert "hidet_erf(" not in without
    assert vector_math.place_own_functions(without) == without  # other generated sources keep their bytes


def test_coefficients_are_what_the_docstring_describes():
    """P(0) = 2/sqrt(pi) (erf'(0)), Q(0) = 1; every coefficient positive (Horner adds
    no cancellation for t^2 >= 0)."""
    p, q = coefficients(vector_math.ERF_P), coefficients(vector_math.ERF_Q)
    assert abs(p[0] - 2 / math.sqrt(math.pi)) < 1e-7 and q[0] == 1.0
    assert min(p) > 0 and min(q) > 0 and len(p) == len(q) == 6
    # the bound the generated source states is the one the sweep holds it to
    assert f"vector_math.py: {vector_math.ULP_BOUNDS['erf']:g} ULP */" in vector_math.OWN_FUNCTIONS["hidet_erff"]
