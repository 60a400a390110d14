"""DSL kernels end to end on the CPU: `@script` → `lower(module, "cpu")` → C → gcc →
ctypes, checked against a float64 numpy reference.

Every test draws fresh random inputs, poisons its outputs with NaN before the call and
uses odd and prime sizes (and 1). Kernels take their sizes as parameters where they
can, so one build serves every size of a test; each build is memoised for the session
(`_compiled`), which keeps the file to a few seconds.
"""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.ir.dtypes import vector_type
from hidet_framework.mapping.task_mapping import auto_map, repeat, spatial
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f16, f32, i32, parallel, register_tensor, script, script_module,
)
from hidet_framework.lowering.pipeline import lower

RTOL = {np.float32: 1e-5, np.float16: 1e-2}
_compiled: dict = {}


def compiled(backend, *fns, name: str):
    """The loaded module of `fns` (with their callees), lowered for and built by the CPU
    backend; built once per session and name."""
    if name not in _compiled:
        _compiled[name] = backend.compile(lower(script_module(*fns, name=name), "cpu"))
    return _compiled[name]


def rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


def check(got, want, dtype=np.float32, scale=1.0):
    """Relative error of `got` against the float64 reference `want`; `scale` widens the
    tolerance for sums of `scale` terms."""
    assert not np.isnan(got).any(), "an output element was never written"
    got = np.asarray(got, np.float64)
    err = np.abs(got - want) / (np.abs(want) + 1.0)
    assert float(err.max(initial=0.0)) <= RTOL[dtype] * scale, f"max rel err {err.max():.3g}"


SIZES = [1, 7, 97, 1009]

# --------------------------------------------------------------- (a) elementwise


@script
def add_f32(n: i32, a: f32[n], b: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = a[i] + b[i]


@script
def fma_f32(n: i32, a: f32[n], b: f32[n], d: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = a[i] * b[i] + d[i]


@script
def fma_f16(n: i32, a: f16[n], b: f16[n], d: f16[n], c: f16[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = a[i] * b[i] + d[i]


@pytest.mark.parametrize("n", SIZES)
def test_elementwise_add_f32(cpu_backend, rng, n):
    lib = compiled(cpu_backend, add_f32, name="dsl_add_f32")
    a, b, c = rand(rng, n), rand(rng, n), poisoned(n)
    lib["add_f32"](n, a, b, c)
    check(c, a.astype(np.float64) + b)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", SIZES)
def test_elementwise_fma(cpu_backend, rng, n, dtype):
    fn = fma_f32 if dtype is np.float32 else fma_f16
    lib = compiled(cpu_backend, fn, name=f"dsl_{fn.ir.name}")
    a, b, d, c = rand(rng, n, dtype), rand(rng, n, dtype), rand(rng, n, dtype), poisoned(n, dtype)
    lib[fn.ir.name](n, a, b, d, c)
    check(c, a.astype(np.float64) * b + d, dtype)


# -------------------------------------------------------- (b) tiled transpose
TR_TILE = auto_map(8, 8, workers=16)  # repeat(4, 1).spatial(2, 8)


@script
def transpose_tiled(m: i32, n: i32, a: f32[m, n], b: f32[n, m]):
    attrs.func_kind = "cpu_kernel"
    tiles_n = (n + 7) // 8
    for t in parallel((m + 7) // 8 * tiles_n):
        for w in range(TR_TILE.num_workers):
            for i, j in TR_TILE.on(w):
                row = t // tiles_n * 8 + i
                col = t % tiles_n * 8 + j
                if row < m and col < n:
                    b[col, row] = a[row, col]


@pytest.mark.parametrize("m,n", [(1, 1), (1, 13), (8, 8), (37, 53), (64, 3), (101, 97)])
def test_tiled_transpose(cpu_backend, rng, m, n):
    lib = compiled(cpu_backend, transpose_tiled, name="dsl_transpose_tiled")
    a, b = rand(rng, (m, n)), poisoned((n, m))
    lib["transpose_tiled"](m, n, a, b)
    assert np.array_equal(b, a.T)


# ------------------------------------------------------------- (c) reductions


@script
def row_sum(m: i32, n: i32, a: f32[m, n], out: f32[m]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(m):
        acc = 0.0
        for j in range(n):
            acc += a[i, j]
        out[i] = acc


@script
def row_max(m: i32, n: i32, a: f32[m, n], out: f32[m]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(m):
        acc = a[i, 0]
        for j in range(1, n):
            acc = max(acc, a[i, j])
        out[i] = acc


@pytest.mark.parametrize("m,n", [(1, 1), (1, 97), (13, 1), (29, 1009)])
def test_row_sum(cpu_backend, rng, m, n):
    lib = compiled(cpu_backend, row_sum, name="dsl_row_sum")
    a, out = rand(rng, (m, n)), poisoned(m)
    lib["row_sum"](m, n, a, out)
    check(out, a.astype(np.float64).sum(axis=1), scale=n)


@pytest.mark.parametrize("m,n", [(1, 1), (1, 97), (13, 1), (29, 1009)])
def test_row_max(cpu_backend, rng, m, n):
    lib = compiled(cpu_backend, row_max, name="dsl_row_max")
    a, out = rand(rng, (m, n)), poisoned(m)
    lib["row_max"](m, n, a, out)
    assert np.array_equal(out, a.max(axis=1))


# ----------------------------------------------------------- (d) naive matmul


@script
def matmul_naive(m: i32, n: i32, k: i32, a: f32[m, k], b: f32[k, n], c: f32[m, n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(m):
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                acc += a[i, kk] * b[kk, j]
            c[i, j] = acc


MNK = [(1, 1, 1), (1, 7, 3), (7, 1, 13), (17, 19, 23), (31, 37, 41), (64, 61, 97)]


@pytest.mark.parametrize("m,n,k", MNK)
def test_naive_matmul(cpu_backend, rng, m, n, k):
    lib = compiled(cpu_backend, matmul_naive, name="dsl_matmul_naive")
    a, b, c = rand(rng, (m, k)), rand(rng, (k, n)), poisoned((m, n))
    lib["matmul_naive"](m, n, k, a, b, c)
    check(c, a.astype(np.float64) @ b, scale=k)


# -------------------------------------------- (e) tiled matmul with task mappings
# One 8x8 tile of C per `parallel` iteration; 16 workers, each a 2x2 block of it.
BM, BN = 8, 8
BLOCK = spatial(4, 4) * repeat(2, 2)  # task shape (8, 8): worker w owns the 2x2 block at (w // 4 * 2, w % 4 * 2)
assert BLOCK.task_shape == (BM, BN)


def make_matmul_tiled(name, mm=None, nn=None, kk_=None):
    """A task-mapping matmul; with `mm, nn, kk_` given, the shapes are compile-time
    constants (a specialised kernel), else they are parameters."""
    regs = BLOCK.register_layout()  # mirror layout: indexed by tile coordinates

    if mm is None:
        @script(name=name)
        def kernel(m: i32, n: i32, k: i32, a: f32[m, k], b: f32[k, n], c: f32[m, n]):
            attrs.func_kind = "cpu_kernel"
            tiles_n = (n + BN - 1) // BN
            for t in parallel((m + BM - 1) // BM * tiles_n):
                for w in range(BLOCK.num_workers):
                    acc = register_tensor(f32, [BM, BN], regs)
                    for i, j in BLOCK.on(w):
                        acc[i, j] = 0.0
                    for kk in range(k):
                        for i, j in BLOCK.on(w):
                            row = t // tiles_n * BM + i
                            col = t % tiles_n * BN + j
                            if row < m and col < n:
                                acc[i, j] += a[row, kk] * b[kk, col]
                    for i, j in BLOCK.on(w):
                        row = t // tiles_n * BM + i
                        col = t % tiles_n * BN + j
                        if row < m and col < n:
                            c[row, col] = acc[i, j]
        return kernel

    tiles_n = (nn + BN - 1) // BN  # host value: folded into the kernel

    @script(name=name)
    def kernel(a: f32[mm, kk_], b: f32[kk_, nn], c: f32[mm, nn]):
        attrs.func_kind = "cpu_kernel"
        for t in parallel((mm + BM - 1) // BM * tiles_n):
            for w in range(BLOCK.num_workers):
                # a worker's 2x2 block, indexed by the repeat part of the task: `% 2`
                acc = register_tensor(f32, [2, 2])
                for i, j in BLOCK.on(w):
                    acc[i % 2, j % 2] = 0.0
                for kk in range(kk_):
                    for i, j in BLOCK.on(w):
                        row = t // tiles_n * BM + i
                        col = t % tiles_n * BN + j
                        if row < mm and col < nn:
                            acc[i % 2, j % 2] += a[row, kk] * b[kk, col]
                for i, j in BLOCK.on(w):
                    row = t // tiles_n * BM + i
                    col = t % tiles_n * BN + j
                    if row < mm and col < nn:
                        c[row, col] = acc[i % 2, j % 2]
    return kernel


matmul_tiled = make_matmul_tiled("matmul_tiled")


@pytest.mark.parametrize("m,n,k", MNK + [(8, 8, 8), (16, 24, 5)])
def test_tiled_matmul(cpu_backend, rng, m, n, k):
    lib = compiled(cpu_backend, matmul_tiled, name="dsl_matmul_tiled")
    a, b, c = rand(rng, (m, k)), rand(rng, (k, n)), poisoned((m, n))
    lib["matmul_tiled"](m, n, k, a, b, c)
    check(c, a.astype(np.float64) @ b, scale=k)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (37, 41, 43)])
def test_tiled_matmul_specialised(cpu_backend, rng, m, n, k):
    name = f"matmul_tiled_{m}x{n}x{k}"
    lib = compiled(cpu_backend, make_matmul_tiled(name, m, n, k), name=f"dsl_{name}")
    a, b, c = rand(rng, (m, k)), rand(rng, (k, n)), poisoned((m, n))
    lib[name](a, b, c)
    check(c, a.astype(np.float64) @ b, scale=k)


# ------------------------------------------------------- (f) device helpers


@script
def fmadd(x: f32, y: f32, z: f32) -> f32:
    attrs.func_kind = "device"
    return x * y + z


@script
def dot_row(n: i32, a: f32[n], b: f32[n]) -> f32:
    attrs.func_kind = "device"
    acc = 0.0
    for i in range(n):
        acc = fmadd(a[i], b[i], acc)
    return acc


@script
def fma_via_helper(n: i32, a: f32[n], b: f32[n], d: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(n):
        c[i] = fmadd(a[i], b[i], d[i])


@script
def matvec_via_helper(m: i32, n: i32, a: f32[m, n], x: f32[n], y: f32[m]):
    attrs.func_kind = "cpu_kernel"
    for i in parallel(m):
        y[i] = dot_row(n, a[i, :], x)


@pytest.mark.parametrize("n", SIZES)
def test_device_helper_scalar(cpu_backend, rng, n):
    lib = compiled(cpu_backend, fma_via_helper, name="dsl_fma_via_helper")
    a, b, d, c = rand(rng, n), rand(rng, n), rand(rng, n), poisoned(n)
    lib["fma_via_helper"](n, a, b, d, c)
    check(c, a.astype(np.float64) * b + d)


@pytest.mark.parametrize("m,n", [(1, 1), (13, 97), (29, 7)])
def test_device_helper_with_tensor_slice(cpu_backend, rng, m, n):
    lib = compiled(cpu_backend, matvec_via_helper, name="dsl_matvec_via_helper")
    a, x, y = rand(rng, (m, n)), rand(rng, n), poisoned(m)
    lib["matvec_via_helper"](m, n, a, x, y)
    check(y, a.astype(np.float64) @ x, scale=n)


# ------------------------------------------------------------ (g) vectorized


def make_vector_add(lanes):
    """c = a + b with `float32x<lanes>` loads and stores and a scalar tail; vector
    loads are `deref(cast(address_of(a[i]), ~float32xN))` as in the C codegen's docs."""
    vp = PointerType(vector_type("float32", lanes))

    @script(name=f"vector_add_x{lanes}")
    def kernel(n: i32, a: f32[n], b: f32[n], c: f32[n]):
        attrs.func_kind = "cpu_kernel"
        for v in parallel(n // lanes):
            i = v * lanes
            out = cast(address_of(c[i]), vp)
            out[0] = deref(cast(address_of(a[i]), vp)) + deref(cast(address_of(b[i]), vp))
        for i in range(n // lanes * lanes, n):
            c[i] = a[i] + b[i]
    return kernel


VECTOR_ADDS = {lanes: make_vector_add(lanes) for lanes in (8, 16)}


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("n", [1, 7, 16, 97, 1009])
def test_vector_add(cpu_backend, rng, lanes, n):
    fn = VECTOR_ADDS[lanes]
    lib = compiled(cpu_backend, fn, name=f"dsl_{fn.ir.name}")
    # unaligned views: vector pointers must not assume alignment beyond one element
    a, b, c = rand(rng, n + 1)[1:], rand(rng, n + 1)[1:], poisoned(n + 1)[1:]
    lib[fn.ir.name](n, a, b, c)
    check(c, a.astype(np.float64) + b)


def test_vector_add_uses_vector_types(cpu_backend):
    lowered = lower(script_module(VECTOR_ADDS[8], name="vector_add_source"), "cpu")
    source = cpu_backend.codegen(lowered, cpu_backend.detect_target())
    assert "(float32x8_u*)&a[i]" in source and "hidet_parallel_for(" in source
