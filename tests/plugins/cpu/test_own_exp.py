"""The float32 exp of our own (``hidet_expf``, hidet_plugin_cpu/vector_math.py) and the
lane reductions (``hidet_row_max_f32`` / ``hidet_row_sum_f32``, row_math.py), which the
CPU softmax calls through ``primitives.own_exp`` / ``row_max`` / ``row_sum``.

``hidet_exp_sum_f32`` (``primitives.exp_sum``: a row replaced by exp(row - top), and
its sum; vscalefps blocks with AVX-512) must give hidet_expf's bits and the sum in
its documented order. exp is built in a real kernel (vectorized lanes and the scalar tail of a prime-length
loop, poisoned outputs) and checked against float64 ``np.exp``: its stated ULP bound
over every binade of the float range, both signs, denormal inputs, densely over
[-104, 89] (denormal results, overflow), the IEEE special values exactly; natively and
for AVX2 (gcc told ``-mno-avx512f``: a different SIMD clone). The reductions must give
exactly the halving tree of the docstring (adds in that order; ``b > a ? b : a`` for
the max, NaN included) for every lane count they take, and refuse the others.
"""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.ir.math_functions import exp
from hidet_framework.lang import address_of, attrs, f32, i32, parallel, script
from hidet_plugin_cpu import vector_math
from hidet_plugin_cpu.primitives import ROW_LANES, exp_sum, own_exp, row_max, row_sum

from .own_math import ISAS, build, check_defined_only_where_called, check_ulp_sweep, coefficients, run

FLOAT32_TINY = np.float32(2.0 ** -149)


@script
def own_exp_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = own_exp(a[i])


@script
def libm_exp_k(n: i32, a: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = exp(a[i])


@pytest.mark.parametrize("isa", ISAS)
def test_ulp_bound_and_special_values(cpu_backend, rng, isa, monkeypatch):
    source, library = build(own_exp_k, "own_exp", cpu_backend, isa, monkeypatch)
    assert "static inline float hidet_expf(float x)" in source and "hidet_expf(a[" in source
    # the whole finite range of results (denormal ones and the overflow edge), densely
    c = check_ulp_sweep(library, "own_exp_k", "own_exp", np.exp, rng, bends=110.0, worst=(-104.5, 89.5, 400_009))
    assert np.all(c[np.isfinite(c)] >= 0)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, FLOAT32_TINY, -FLOAT32_TINY, 88.72, 88.73, 88.8, 88.81,
                        -103.9, -103.98, -104.0, -104.01, -1e30, 1e30, -87.5, 1.0, -np.nan], np.float32)
    out = run(library, "own_exp_k", special, poison=7.0)
    assert np.isnan(out[0]) and np.isnan(out[19])
    assert out[1] == np.inf and out[2] == 0.0 and not np.signbit(out[2])
    assert out[3] == 1.0 and out[4] == 1.0 and out[5] == 1.0 and out[6] == 1.0
    assert np.isfinite(out[7]) and out[7] > 3.3e38                 # exp(88.72) = 3.39e38 < FLT_MAX
    assert out[8] == np.inf and out[9] == np.inf and out[10] == np.inf
    assert out[11] == FLOAT32_TINY                                 # exp(-103.9) = 1.25e-45: the smallest denormal
    assert out[12] == 0.0 and out[13] == 0.0 and out[14] == 0.0    # below 2^-150: rounds to +0
    assert out[15] == 0.0 and out[16] == np.inf
    want = np.float32(np.exp(np.float64(np.float32(-87.5))))       # a denormal result, to its ULP
    assert 0 < out[17] < np.finfo(np.float32).tiny and abs(float(out[17]) - float(want)) <= 2 * FLOAT32_TINY
    assert abs(out[18] - np.float32(np.e)) <= np.spacing(np.float32(np.e)) * 2.5


def test_definition_only_where_own_exp_is_called():
    with_source, without = check_defined_only_where_called(own_exp_k, libm_exp_k,
                                                           "static inline float hidet_expf(float x)")
    assert "expf(a[" in without and "hidet_expf" not in without   # the exp primitive stays libm's expf
    assert vector_math.place_own_functions(without) == without     # other generated sources keep their bytes
    assert "hidet_row_" not in with_source


def test_coefficients_are_what_the_docstring_describes():
    """exp(r) = 1 + r * P(r): P(0) = exp'(0) = 1 to float rounding, the next ones near
    the Taylor series' 1/k!; the bound the source states is the one the sweep holds."""
    p = coefficients(vector_math.EXP_P)
    assert len(p) == 5 and abs(p[0] - 1.0) < 1e-6
    for k, c in enumerate(p[1:], start=2):
        assert abs(c * np.prod(np.arange(1, k + 1)) - 1.0) < 0.01
    assert f"vector_math.py: {vector_math.ULP_BOUNDS['own_exp']:g} ULP */" in vector_math.OWN_FUNCTIONS["hidet_expf"]


def _halving(values: np.ndarray, op) -> np.ndarray:
    """The tree of the docstring on float32 rows: p[j] = op(p[j], p[j + h]), h = n/2 .. 1."""
    p = values.astype(np.float32).copy()
    h = p.shape[1] // 2
    while h >= 1:
        p[:, :h] = op(p[:, :h], p[:, h:2 * h])
        h //= 2
    return p[:, 0]


def _reduction_kernels(lanes: int):
    @script
    def row_reduce_k(rows: i32, a: f32[rows * lanes], mx: f32[rows], sm: f32[rows]):
        attrs.func_kind = "cpu_kernel"
        for i in parallel(rows):
            mx[i] = row_max(address_of(a[i * lanes]), lanes)
            sm[i] = row_sum(address_of(a[i * lanes]), lanes)

    return row_reduce_k


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("lanes", ROW_LANES)
def test_row_reductions_are_the_halving_tree(cpu_backend, rng, isa, lanes, monkeypatch):
    kernel = _reduction_kernels(lanes)
    source, library = build(kernel, f"row_reduce_{lanes}", cpu_backend, isa, monkeypatch)
    assert "static inline float hidet_row_max_f32(const float* p, int n)" in source
    rows = 31
    a = (rng.standard_normal((rows, lanes)) * np.exp2(rng.integers(-20, 20, (rows, lanes)))).astype(np.float32)
    a[3, rng.integers(lanes)] = np.nan                       # wherever it lands, it is the max (numpy's maximum)
    a[4, :] = -np.inf
    a[5, rng.integers(lanes)] = np.inf
    a[6, :] = np.nan
    mx, sm = np.full(rows, 7.0, np.float32), np.full(rows, 7.0, np.float32)
    library["row_reduce_k"](rows, a.reshape(-1), mx, sm)
    with np.errstate(invalid="ignore"):
        want_max = _halving(a, np.maximum)                      # the IR's max (session 14: a NaN is kept)
        want_sum = _halving(a, lambda x, y: x + y)
    np.testing.assert_array_equal(mx, want_max)               # bit for bit, NaN where the tree keeps one
    np.testing.assert_array_equal(sm, want_sum)
    assert mx[4] == -np.inf and mx[5] == np.inf and np.isnan(sm[3]) and np.isnan(sm[6])
    assert np.isnan(mx[3]) and np.isnan(mx[6])


@pytest.mark.parametrize("lanes", [4, 12, 256])
def test_row_reductions_refuse_other_lane_counts(lanes):
    from hidet_framework.ir.expr import Var
    from hidet_framework.ir.types import PointerType

    with pytest.raises(ValueError, match="lanes"):
        row_sum(Var("p", PointerType(f32)), lanes)


def _exp_sum_kernel(count: int):
    @script
    def exp_sum_k(rows: i32, e: f32[rows * count], top: f32[rows], total: f32[rows]):
        attrs.func_kind = "cpu_kernel"
        for i in parallel(rows):
            total[i] = exp_sum(address_of(e[i * count]), top[i], count)

    return exp_sum_k


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("count", [1, 31, 32, 97, 128, 1000])
def test_exp_sum_gives_hidet_expf_bits_and_the_documented_sum(cpu_backend, rng, isa, count, monkeypatch):
    """Every value is hidet_expf(e - top) bit for bit (the vscalefps blocks of the
    AVX-512 build included), special values too; the sum is 32 lane accumulators, the
    halving tree over them, then the tail in order."""
    _, exp_library = build(own_exp_k, "own_exp_ref", cpu_backend, isa, monkeypatch)
    source, library = build(_exp_sum_kernel(count), f"exp_sum_{count}", cpu_backend, isa, monkeypatch)
    assert "#ifdef __AVX512F__" in source and "static inline float hidet_expf(float x)" in source
    assert source.index("hidet_expf(float x)") < source.index("hidet_exp_sum_f32(float* e")
    rows = 11
    e = (rng.standard_normal((rows, count)) * 30).astype(np.float32)
    e[1, rng.integers(count)] = -np.inf                      # masked scores
    e[2] = np.linspace(-140.0, 120.0, count, dtype=np.float32)  # denormal results, 0, overflow past 88.72
    e[3, rng.integers(count)] = np.nan
    e[4, rng.integers(count)] = np.inf
    e[5] = -np.inf
    top = np.max(np.where(np.isnan(e), -np.inf, e), axis=1).astype(np.float32)
    top[2] = 0.0                                             # arguments e - top of both signs
    top[5] = 0.0                                             # a masked row under a finite max: zeros
    top[6] = np.nan
    x = e.copy()
    total = np.full(rows, 7.0, np.float32)
    library["exp_sum_k"](rows, x.reshape(-1), top, total)
    with np.errstate(invalid="ignore"):
        args = (e - top[:, None]).astype(np.float32)
    want = run(exp_library, "own_exp_k", args.reshape(-1), poison=7.0).reshape(rows, count)
    np.testing.assert_array_equal(x, want)                   # same bits, NaN where hidet_expf gives NaN
    blocks = count // 32 * 32
    lanes = want[:, :blocks].reshape(rows, -1, 32)
    acc = np.zeros((rows, 32), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for b in range(lanes.shape[1]):
            acc = (acc + lanes[:, b]).astype(np.float32)
        expect = _halving(acc, lambda a, b: a + b)
        for j in range(blocks, count):
            expect = (expect + want[:, j]).astype(np.float32)
    np.testing.assert_array_equal(total, expect)
    assert x[2, 0] == 0.0 and np.all(x[5] == 0.0) and total[5] == 0.0 and np.isnan(total[6])
    if count > 1:
        assert x[2, -1] == np.inf and total[2] == np.inf
