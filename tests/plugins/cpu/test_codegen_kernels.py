"""C code generator end to end: hand-built lowered IR → C → gcc → ctypes → compared with
a float64 numpy reference (fresh random inputs, NaN-poisoned outputs, odd/prime sizes)."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.ir import (
    Address, BufferStoreStmt, Dereference, DeclareStmt, AssignStmt, ForStmt, Function, IfStmt,
    LetStmt, Scope, cast, const, logical_and, module, pointer_type, seq, tensor_type, var, vector_type,
)
from hidet_framework.ir import dtypes
from hidet_plugin_cpu.codegen import generate


def build(backend, m):
    source = generate(m, backend.detect_target())
    return backend.load(backend.build(source, backend.detect_target(), name=m.name), m), source


def rel_err(got, want):
    got = np.asarray(got, np.float64)
    return float(np.max(np.abs(got - want) / (np.abs(want) + 1e-3))) if want.size else 0.0


def poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


@pytest.mark.parametrize("n", [1, 7, 97, 1009, 65537])
def test_parallel_elementwise_add(cpu_backend, rng, n):
    nv = var("n")
    a, b, c = (var(h, tensor_type("float32", [nv])) for h in "abc")
    i = var("i")
    body = ForStmt(i, nv, BufferStoreStmt(c, [i], a[i] + b[i]), parallel=True)
    lib, source = build(cpu_backend, module("vadd", [Function("vadd", [a, b, c, nv], body)]))
    assert "hidet_parallel_for(vadd_par0_task" in source  # a task of the thread pool
    x, y, out = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32), poisoned(n)
    lib["vadd"](x, y, out, n)
    assert rel_err(out, x.astype(np.float64) + y) < 1e-6


@pytest.mark.parametrize("m,n", [(1, 1), (13, 29), (37, 1009)])
def test_row_reduction(cpu_backend, rng, m, n):
    a = var("a", tensor_type("float32", [m, n]))
    out = var("out", tensor_type("float32", [m]))
    i, j, acc = var("i"), var("j"), var("acc", "float32")
    body = ForStmt(i, m, seq(
        DeclareStmt(acc, const(0.0)),
        ForStmt(j, n, AssignStmt(acc, acc + a[i * n + j])),
        BufferStoreStmt(out, [i], acc)), parallel=True)
    lib, _ = build(cpu_backend, module("rowsum", [Function("rowsum", [a, out], body, kind="cpu_kernel")]))
    x, y = rng.standard_normal((m, n), np.float32), poisoned(m)
    lib["rowsum"](x, y)
    assert np.max(np.abs(y - x.astype(np.float64).sum(1))) < 1e-5 * n


def _naive_matmul(m, n, k, flat):
    a, b = var("A", tensor_type("float32", [m, k])), var("B", tensor_type("float32", [k, n]))
    c = var("C", tensor_type("float32", [m, n]))
    i, j, kk, acc = var("i"), var("j"), var("k"), var("acc", "float32")
    av = a[i * k + kk] if flat else a[i, kk]  # flat offsets (lowered) or row-major indices
    bv = b[kk * n + j] if flat else b[kk, j]
    body = ForStmt(i, m, ForStmt(j, n, seq(
        DeclareStmt(acc, const(0.0)),
        ForStmt(kk, k, AssignStmt(acc, acc + av * bv)),
        BufferStoreStmt(c, [i * n + j] if flat else [i, j], acc))), parallel=True)
    return module("matmul", [Function("matmul", [a, b, c], body)])


@pytest.mark.parametrize("m,n,k,flat", [(1, 1, 1, True), (17, 23, 31, True), (64, 37, 97, False)])
def test_naive_matmul(cpu_backend, rng, m, n, k, flat):
    lib, _ = build(cpu_backend, _naive_matmul(m, n, k, flat))
    a, b, c = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32), poisoned((m, n))
    lib["matmul"](a, b, c)
    assert np.max(np.abs(c - a.astype(np.float64) @ b)) < 1e-5 * k


def _tiled_matmul(tm, tn):
    """Each (tile row, tile col) accumulates a tm x tn register tile (a local array),
    predicated at the edges so any size works."""
    m, n, k = var("m"), var("n"), var("k")
    a, b = var("A", pointer_type("float32")), var("B", pointer_type("float32"))
    c = var("C", pointer_type("float32"))
    acc = var("acc", tensor_type("float32", [tm, tn]))
    bi, bj, kk, ii, jj = (var(h) for h in ("bi", "bj", "kk", "ii", "jj"))
    row, col = bi * tm + ii, bj * tn + jj
    inside = logical_and(row < m, col < n)
    zero = ForStmt(ii, tm, ForStmt(jj, tn, BufferStoreStmt(acc, [ii * tn + jj], 0.0), unroll=True), unroll=True)
    fma = ForStmt(ii, tm, ForStmt(jj, tn, IfStmt(inside, BufferStoreStmt(
        acc, [ii * tn + jj], acc[ii * tn + jj] + a[row * k + kk] * b[kk * n + col])), unroll=tn), unroll=tm)
    store = ForStmt(ii, tm, ForStmt(jj, tn, IfStmt(inside, BufferStoreStmt(c, [row * n + col], acc[ii * tn + jj]))))
    body = ForStmt(bi, (m + tm - 1) // tm, ForStmt(bj, (n + tn - 1) // tn, seq(
        DeclareStmt(acc, scope=Scope.REGISTER), zero, ForStmt(kk, k, fma), store)), parallel=True)
    return module("tiled", [Function("tiled", [a, b, c, m, n, k], body)])


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (5, 3, 2), (67, 45, 83)])
def test_tiled_matmul_with_register_tiles(cpu_backend, rng, m, n, k):
    lib, source = build(cpu_backend, _tiled_matmul(4, 8))
    assert "float acc[32];" in source and "#pragma GCC unroll 8" in source
    a, b, c = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32), poisoned((m, n))
    lib["tiled"](a, b, c, m, n, k)
    assert np.max(np.abs(c - a.astype(np.float64) @ b)) < 1e-5 * k


@pytest.mark.parametrize("n", [1, 13, 1031])
def test_float16_storage(cpu_backend, rng, n):
    """float16 in memory and as a scalar parameter; arithmetic in float32."""
    a, b, c = (var(h, tensor_type("float16", [n])) for h in "abc")
    s, i = var("s", "float16"), var("i")
    body = ForStmt(i, n, BufferStoreStmt(c, [i], a[i] * b[i] * s + 1.0))
    lib, source = build(cpu_backend, module("h", [Function("hmul", [a, b, c, s], body)]))
    assert "_Float16* __restrict__ a" in source and "uint16_t s_bits" in source
    x, y = rng.uniform(-2, 2, n).astype(np.float16), rng.uniform(-2, 2, n).astype(np.float16)
    out = np.full(n, np.nan, np.float16)
    lib["hmul"](x, y, out, 1.5)
    want = x.astype(np.float64) * y * 1.5 + 1.0
    assert rel_err(out, want) < 2e-3


@pytest.mark.parametrize("n", [1, 13, 1031])
def test_bfloat16_storage(cpu_backend, rng, n):
    """bfloat16 arrays travel as uint16 bit patterns; computed in float, rounded on store."""
    a, c = var("a", tensor_type("bfloat16", [n])), var("c", tensor_type("bfloat16", [n]))
    s, i, t = var("s", "bfloat16"), var("i"), var("t", "float32")
    body = ForStmt(i, n, LetStmt(t, a[i] * s, BufferStoreStmt(c, [i], t + cast(a[i], "float32"))))
    lib, _ = build(cpu_backend, module("bf", [Function("bf", [a, c, s], body)]))
    x = rng.uniform(-4, 4, n).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncate to bf16 exactly representable
    xs = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    out = np.full(n, 0x7FC0, np.uint16)  # bf16 NaN
    lib["bf"](bits, out, 0.75)
    got = (out.astype(np.uint32) << 16).view(np.float32)
    assert rel_err(got, xs * 0.75 + xs) < 1e-2


@pytest.mark.parametrize("n", [3, 8, 13, 1009])
def test_vectorized_add_float32x8(cpu_backend, rng, n):
    """Vector loads/stores via casts of element addresses; scalar tail for the rest."""
    f32x8 = vector_type(dtypes.float32, 8)
    vp = pointer_type(f32x8)
    nv = var("n")
    a, b, c = (var(h, tensor_type("float32", [nv])) for h in "abc")
    i, j, va = var("i"), var("j"), var("va", f32x8)
    vec = ForStmt(i, nv // 8, seq(
        DeclareStmt(va, Dereference(cast(Address(a[i * 8]), vp))),
        BufferStoreStmt(cast(Address(c[i * 8]), vp), [0], va + Dereference(cast(Address(b[i * 8]), vp)))))
    tail = ForStmt(j, nv % 8, BufferStoreStmt(c, [nv // 8 * 8 + j], a[nv // 8 * 8 + j] + b[nv // 8 * 8 + j]))
    lib, source = build(cpu_backend, module("vec", [Function("vadd8", [a, b, c, nv], seq(vec, tail))]))
    assert "typedef float float32x8 __attribute__((vector_size(32)));" in source
    assert "*(float32x8_u*)&a[i * 8]" in source
    x, y, out = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32), poisoned(n)
    lib["vadd8"](x[0:], y, out, n)
    assert rel_err(out, x.astype(np.float64) + y) < 1e-6


def test_device_helper_call_and_return(cpu_backend, rng):
    """A static inline helper with a return value, called from an exported function."""
    x, y = var("x", "float32"), var("y", "float32")
    helper = Function("axpy helper", [x, y], seq(__import__("hidet_framework.ir", fromlist=["ReturnStmt"])
                      .ReturnStmt(x * 2.0 + y)), kind="device", ret_type=dtypes.float32)
    from hidet_framework.ir import Call
    n = 31
    a, c, i = var("a", tensor_type("float32", [n])), var("c", tensor_type("float32", [n])), var("i")
    main = Function("main", [a, c], ForStmt(i, n, BufferStoreStmt(
        c, [i], Call("axpy helper", (a[i], const(1.0)), dtypes.float32))))
    lib, source = build(cpu_backend, module("calls", [main, helper]))
    assert "static inline float axpy_helper_" in source and "HIDET_EXPORT void main_(" in source
    v, out = rng.standard_normal(n, np.float32), poisoned(n)
    lib["main"](v, out)
    assert rel_err(out, v.astype(np.float64) * 2 + 1) < 1e-6
