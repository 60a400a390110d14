"""Issue 12 items 2 and 3: a kernel whose array extents are scalar parameters checks
them at call time (no out-of-bounds access, no heap corruption), and an array the
kernel may write must be writable."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.backend.signature import FunctionSignature, ParamSpec
from hidet_framework.lang import attrs, f32, i32, parallel, script, script_module
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_cpu.codegen import signatures


@script
def vector_add(n: i32, a: f32[n], b: f32[n], c: f32[n]):
    attrs.func_kind = "cpu_kernel"
    for w in parallel(2):
        for i in range(w, n, 2):
            c[i] = a[i] + b[i]


@script
def pair_rows(m: i32, n: i32, x: f32[m, n * 2], y: f32[m, n]):
    attrs.func_kind = "cpu_kernel"
    for i in range(m):
        for j in range(n):
            y[i, j] = x[i, 2 * j] + x[i, 2 * j + 1]


_built: dict = {}


def _kernels(cpu_backend, fn, name):
    if name not in _built:
        module = lower(script_module(fn, name=name), "cpu")
        _built[name] = (cpu_backend.compile(module), signatures(module))
    return _built[name]


def test_signature_knows_extents_and_writes(cpu_backend):
    _, sigs = _kernels(cpu_backend, vector_add, "calltime_vadd")
    params = {p.name: p for p in sigs["vector_add"].params}
    assert params["a"].extents == ("$0",) and params["c"].extents == ("$0",)
    assert (params["a"].writes, params["b"].writes, params["c"].writes) == (False, False, True)
    _, sigs = _kernels(cpu_backend, pair_rows, "calltime_pairs")
    params = {p.name: p for p in sigs["pair_rows"].params}
    assert params["x"].extents == ("$0", "($1 * 2)") and params["y"].extents == ("$0", "$1")
    assert FunctionSignature.from_json(sigs["pair_rows"].to_json()) == sigs["pair_rows"]


@pytest.mark.parametrize("n", [1, 2, 97, 1009])
def test_right_extents_still_run_against_float64(cpu_backend, rng, n):
    kernels, _ = _kernels(cpu_backend, vector_add, "calltime_vadd")
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    a.setflags(write=False)  # inputs may be read-only
    c = np.full(n, np.nan, np.float32)
    kernels["vector_add"](n, a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) + b, rtol=1e-6)


@pytest.mark.parametrize("n_arg, sizes", [(1 << 20, (7, 7, 7)), (8, (7, 7, 7)), (7, (7, 3, 7)),
                                          (7, (7, 7, 1 << 12)), (0, (7, 7, 7))])
def test_extent_mismatch_is_refused_before_the_kernel_runs(cpu_backend, n_arg, sizes):
    kernels, _ = _kernels(cpu_backend, vector_add, "calltime_vadd")
    a, b, c = (np.full(s, 1.0, np.float32) for s in sizes)
    before = c.copy()
    with pytest.raises(ValueError, match=r"must have extent \d+ in dimension 0 \(given by the scalar arguments n="):
        kernels["vector_add"](n_arg, a, b, c)
    np.testing.assert_array_equal(c, before)


def test_two_dimensional_extent_expressions_are_checked(cpu_backend, rng):
    kernels, _ = _kernels(cpu_backend, pair_rows, "calltime_pairs")
    m, n = 3, 5
    x = rng.standard_normal((m, 2 * n)).astype(np.float32)
    y = np.full((m, n), np.nan, np.float32)
    kernels["pair_rows"](m, n, x, y)
    np.testing.assert_allclose(y, x[:, 0::2].astype(np.float64) + x[:, 1::2], rtol=1e-6)
    with pytest.raises(ValueError, match="'x' must have extent 12 in dimension 1"):
        kernels["pair_rows"](m, n + 1, x, np.zeros((m, n + 1), np.float32))
    with pytest.raises(ValueError, match="'y' must have extent 4 in dimension 0"):
        kernels["pair_rows"](4, n, np.zeros((4, 2 * n), np.float32), y)


def test_read_only_output_is_refused(cpu_backend):
    kernels, _ = _kernels(cpu_backend, vector_add, "calltime_vadd")
    a = b = np.ones(5, np.float32)
    c = np.zeros(5, np.float32)
    c.setflags(write=False)
    with pytest.raises(ValueError, match="'c' may be written by the function, but the array is read-only"):
        kernels["vector_add"](5, a, b, c)
    assert not c.any()
    immutable = np.frombuffer(bytes(20), np.float32)  # a view of an immutable bytes object
    with pytest.raises(ValueError, match="read-only"):
        kernels["vector_add"](5, a, b, immutable)


@pytest.mark.parametrize("forged", ["__import__('os')", "$0 ** 99", "$7", "$0(1)", "len($0)", "-1"])
def test_stored_extent_expressions_are_validated(forged):
    with pytest.raises((ValueError, SyntaxError)):
        FunctionSignature("f", [ParamSpec("n", "scalar", "int32"),
                                ParamSpec("a", "tensor", "float32", (None,), extents=(forged,))])


def test_extent_may_only_name_scalars():
    with pytest.raises(ValueError, match="not a scalar"):
        FunctionSignature("f", [ParamSpec("b", "tensor", "float32", (None,)),
                                ParamSpec("a", "tensor", "float32", (None,), extents=("$0",))])
