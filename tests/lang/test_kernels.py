"""Whole kernels written in the DSL, run with the IR evaluator and checked against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.analysis.evaluator import evaluate_function
from hidet_framework.ir.stmt import ForMappingStmt, ForStmt
from hidet_framework.lang import attrs, cast, f32, grid, i32, parallel, script, script_module, static_range, unroll

rng = np.random.default_rng()


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype("float32")


def poisoned(*shape: int) -> np.ndarray:
    return np.full(shape, np.nan, dtype="float32")


def make_add(n, block=128):
    """A template: `n` and `block` come from the closure / defining frame."""

    @script
    def add(a: f32[n], b: f32[n], c: f32[n]):
        attrs.func_kind = "cpu_kernel"
        for w in parallel(4):
            for i in range(w, n, 4):
                if i < block:
                    c[i] = a[i] + b[i]
                else:
                    c[i] = 0.0
    return add


@pytest.mark.parametrize("n", [1, 7, 13, 64])
def test_elementwise_add_template(n):
    add = make_add(n)
    assert add.ir.kind == "cpu_kernel"
    outer = add.ir.body
    assert isinstance(outer, ForStmt) and outer.parallel
    a, b, c = rand(n), rand(n), poisoned(n)
    evaluate_function(add.ir, a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_template_parameter_changes_the_kernel():
    a, b, c = rand(10), rand(10), poisoned(10)
    evaluate_function(make_add(10, block=4).ir, a, b, c)
    np.testing.assert_allclose(c, np.where(np.arange(10) < 4, a + b, 0.0), rtol=1e-6)


@script
def row_sums(m: i32, n: i32, x: f32[m, n], y: f32[m]):
    for i in range(m):
        acc = 0.0
        for j in range(n):
            acc += x[i, j]
        y[i] = acc


@pytest.mark.parametrize("m,n", [(1, 1), (3, 5), (7, 11)])
def test_row_sums(m, n):
    x, y = rand(m, n), poisoned(m)
    evaluate_function(row_sums.ir, m, n, x, y)
    np.testing.assert_allclose(y, x.astype("float64").sum(1), rtol=1e-5, atol=1e-5)


def make_matmul(m, n, k):
    @script
    def matmul(a: f32[m, k], b: f32[k, n], c: f32[m, n]):
        attrs.func_kind = "cpu_kernel"
        for i, j in grid(m, n):
            acc: f32 = 0.0
            for kk in range(k):
                acc += a[i, kk] * b[kk, j]
            c[i, j] = acc
    return matmul


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (5, 3, 7), (4, 13, 2)])
def test_naive_matmul(m, n, k):
    mm = make_matmul(m, n, k)
    a, b, c = rand(m, k), rand(k, n), poisoned(m, n)
    evaluate_function(mm.ir, a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-5, atol=1e-5)


def test_transpose_with_task_mapping_over_all_workers():
    from hidet_framework.mapping.task_mapping import repeat, spatial

    mapping = repeat(2, 1) * spatial(4, 3) * repeat(1, 2)  # task shape (8, 6), 12 workers
    rows, cols = mapping.task_shape

    @script
    def transpose(a: f32[rows, cols], b: f32[cols, rows]):
        for w in range(mapping.num_workers):
            for i, j in mapping.on(w):
                b[j, i] = a[i, j]

    inner = transpose.ir.body.body
    assert isinstance(inner, ForMappingStmt) and len(inner.vars) == 2 and inner.mapping is mapping
    a, b = rand(rows, cols), poisoned(cols, rows)
    evaluate_function(transpose.ir, a, b)
    np.testing.assert_array_equal(b, a.T)


def test_range_forms_and_static_unrolling():
    @script
    def fill(out: f32[20]):
        for i in range(20):
            out[i] = 0.0
        for i in range(3, 17, 5):          # 3, 8, 13
            out[i] += 1.0
        for i in unroll(2):
            out[i] += 10.0
        for s in static_range(4):           # traced 4 times; s is a Python int
            out[19 - s] += s * 100.0
        for i, j in grid(2, 3, unroll=True):
            out[4 + i * 3 + j] += 1000.0

    out = poisoned(20)
    evaluate_function(fill.ir, out)
    expect = np.zeros(20, "float32")
    expect[[3, 8, 13]] += 1
    expect[:2] += 10
    for s in range(4):
        expect[19 - s] += s * 100
    expect[4:10] += 1000
    np.testing.assert_array_equal(out, expect)
    loops = [s for s in fill.ir.body.stmts if isinstance(s, ForStmt)]
    assert loops[2].unroll is True and loops[3].unroll is True and loops[3].body.unroll is True


def test_negative_step_range():
    @script
    def rev(n: i32, out: f32[10]):
        k = 0
        for i in range(n - 1, -1, -1):
            out[k] = cast(i, "f32")
            k += 1
    out = poisoned(10)
    evaluate_function(rev.ir, 10, out)
    np.testing.assert_array_equal(out, np.arange(9, -1, -1))


def test_module_collects_everything_and_prints():
    mod = script_module(row_sums, make_matmul(2, 2, 2), name="kernels")
    assert list(mod.functions) == ["row_sums", "matmul"]
    assert "def matmul" in str(mod)
