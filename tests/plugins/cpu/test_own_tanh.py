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
from hidet_framework.lang import attrs, f32, i32, parallel, script
from hidet_plugin_cpu import vector_math

from .own_math import ISAS, build, check_defined_only_where_called, check_ulp_sweep, coefficients, run


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


@pytest.mark.parametrize("isa", ISAS)
def test_ulp_bound_and_special_values(cpu_backend, rng, isa, monkeypatch):
    source, library = build(own_tanh_k, "own_tanh", cpu_backend, isa, monkeypatch)
    assert "static inline float hidet_tanhf(float x)" in source and "hidet_tanhf(a[" in source
    # where tanh bends, and the worst region
    c = check_ulp_sweep(library, "own_tanh_k", "tanh", np.tanh, rng, bends=10.0, worst=(7.0, 9.2, 100_003))
    assert np.nanmax(np.abs(c)) <= 1.0                    # never 1 + 2^-23 (the clamp on the magnitude)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0 ** -149, -(2.0 ** -149), 1e-30, 9.1, 1e30, -1e30,
                        9.05, -9.05], np.float32)
    out = run(library, "own_tanh_k", special, poison=7.0)
    assert np.isnan(out[0])
    assert out[1] == 1.0 and out[2] == -1.0 and out[8] == 1.0 and out[9] == 1.0 and out[10] == -1.0
    assert out[11] == 1.0 and out[12] == -1.0                                # past 9.01 tanh rounds to 1
    assert out[3] == 0.0 and not np.signbit(out[3]) and out[4] == 0.0 and np.signbit(out[4])
    assert out[5] == np.float32(2.0 ** -149) and out[6] == -out[5]         # tanh(x) = x for tiny x
    assert out[7] == np.float32(1e-30)


def test_definition_only_where_tanh_is_called():
    with_tanh, _ = check_defined_only_where_called(own_tanh_k, no_tanh_k, "static inline float hidet_tanhf(float x)")
    assert "hidet_erf" not in with_tanh


def test_coefficients_are_what_the_docstring_describes():
    """P(0) = Q(0) = 1 (tanh(x) / x -> 1 at 0); every coefficient positive (Horner adds
    no cancellation for t^2 >= 0); the clamp is past 9.01, where tanh rounds to 1."""
    p, q = coefficients(vector_math.TANH_P), coefficients(vector_math.TANH_Q)
    assert p[0] == 1.0 and q[0] == 1.0
    assert min(p) > 0 and min(q) > 0 and len(p) == len(q) == 6
    # the bound the generated source states is the one the sweep holds it to
    assert f"vector_math.py: {vector_math.ULP_BOUNDS['tanh']:g} ULP */" in vector_math.OWN_FUNCTIONS["hidet_tanhf"]
    assert np.float32(np.tanh(9.02)) == 1.0 and "t > 9.1f ? 9.1f : t" in vector_math.OWN_FUNCTIONS["hidet_tanhf"]
