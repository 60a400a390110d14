"""The in-place proof (fusion/inplace.py): which (output, input) pairs of a scheduled
task may share one buffer. Hand-written kernels over x, r -> y (7 x 5: odd sizes),
each a way of reading r that must be refused, or allowed; every allowed one is then
run with y bound to r's own buffer (the compiled C, no restrict on the pair) against a
float64 reference, and the refused ones that would be wrong in place are shown wrong
that way too (so the refusals are not merely cautious)."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.fusion.inplace import ALIASED_PARAMS, aliasable_pairs, same_expr, why_not_in_place, \
    with_output_aliases
from hidet_framework.ir.expr import var
from hidet_framework.lang import attrs, f32, f64, local_tensor, script, script_module
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask

N, M = 7, 5


def _task(fn, stores_once=True):
    refs = (BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0))
    return ScheduledTask(script_module(fn, name=fn.name), [Launch(fn.name, refs)], stores_once=stores_once)


@script
def residual(x: f32[N, M], r: f32[N, M], y: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for i in range(N):
        for j in range(M):
            y[i, j] = x[i, j] * 2.0 + r[i, j]


@script
def shifted(x: f32[N, M], r: f32[N, M], y: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for i in range(N):
        for j in range(M):
            y[i, j] = x[i, j] + r[(i + 1) % N, j]        # another index: wrong in place


@script
def swapped(x: f32[N, M], r: f32[M, N], y: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for i in range(N):
        for j in range(M):
            y[i, j] = x[i, j] + r[j, i]                  # another shape (a transpose)


@script
def summed(x: f32[N, M], r: f32[N, M], y: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for i in range(N):
        for j in range(M):
            y[i, j] = x[i, j] + r[i, j] + r[i, 0]        # one read at the index, one elsewhere


@script
def read_back(x: f32[N, M], r: f32[N, M], y: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for i in range(N):
        for j in range(M):
            y[i, j] = x[i, j]
    for i in range(N):
        for j in range(M):
            y[i, j] = y[i, j] + r[i, j]                  # reads its output back


@script
def read_outside(x: f32[N, M], r: f32[N, M], y: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for i in range(N):
        s = 0.0
        for j in range(M):
            s += r[i, j]                                 # a read outside a store into y
        for j in range(M):
            y[i, j] = x[i, j] + s


@script
def writes_input(x: f32[N, M], r: f32[N, M], y: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for i in range(N):
        for j in range(M):
            r[i, j] = 0.0
            y[i, j] = x[i, j]


@script
def wider(x: f32[N, M], r: f64[N, M], y: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for i in range(N):
        for j in range(M):
            y[i, j] = x[i, j] + r[i, j]                  # another dtype


def test_the_residual_pattern_is_proven_and_marked():
    scheduled = _task(residual)
    assert why_not_in_place(scheduled, 0, 1) == ""
    # y = 2x + r reads x at y's index too: either may give y its buffer (the compiled
    # graph takes the first that dies at the kernel)
    assert why_not_in_place(scheduled, 0, 0) == ""
    marked = with_output_aliases(scheduled, 2, 1)
    assert marked.output_aliases == ((0, 0), (0, 1))
    fn = marked.module.functions["residual"]
    assert fn.attrs[ALIASED_PARAMS] == (0, 1, 2)


@pytest.mark.parametrize("kernel, why", [
    (shifted, "another index"), (swapped, "dtype or shape"), (summed, "another index"),
    (read_back, "reads the output"), (read_outside, "outside a store"), (writes_input, "stores into the input"),
    (wider, "dtype or shape"),
])
def test_refused_reads(kernel, why):
    scheduled = _task(kernel)
    assert why in why_not_in_place(scheduled, 0, 1)
    assert (0, 1) not in aliasable_pairs(scheduled, 2, 1)
    marked = with_output_aliases(scheduled, 2, 1)
    assert (0, 1) not in marked.output_aliases
    assert all(1 not in fn.attrs.get(ALIASED_PARAMS, ()) for fn in marked.module.functions.values())


def test_no_promise_no_pairs():
    assert "store each output element once" in why_not_in_place(_task(residual, stores_once=False), 0, 1)
    assert with_output_aliases(_task(residual, stores_once=False), 2, 1).output_aliases == ()


def test_the_input_read_by_another_launch_is_refused():
    @script
    def peek(r: f32[N, M], w: f32[N, M]):
        attrs.func_kind = "cpu_kernel"
        for i in range(N):
            for j in range(M):
                w[i, j] = r[i, j]

    refs = (BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0))
    peeking = Launch("peek", (BufferRef("input", 1), BufferRef("output", 1)))
    scheduled = ScheduledTask(script_module(residual, peek, name="two"), [Launch("residual", refs), peeking],
                              stores_once=True)
    assert "bound once" in why_not_in_place(scheduled, 0, 1)


def test_same_expr_compares_variables_by_identity():
    i, j = var("i", "int32"), var("j", "int32")
    assert same_expr(i + 1, i + 1) and not same_expr(i + 1, j + 1)


# ---- run in place: the compiled C with y bound to r's buffer --------------------------------------

def _run(kernel, in_place: bool, rng):
    from hidet_framework.driver.targets import resolve_compile_target
    from hidet_framework.runtime.compiled_task import compile_scheduled
    from hidet_framework.compute import compute, tensor_input
    from hidet_framework.compute.task import Task

    target = resolve_compile_target("cpu")
    scheduled = with_output_aliases(_task(kernel), 2, 1)
    xs = tensor_input("x", "float32", (N, M))
    rs = tensor_input("r", kernel.ir.params[1].type.dtype.name, tuple(kernel.ir.params[1].type.shape))
    task = Task(kernel.name, [xs, rs], [compute("y", [N, M], lambda i, j: xs[i, j])])
    compiled = compile_scheduled(task, scheduled, target.backend, target.target)
    x = rng.standard_normal((N, M)).astype(np.float32)
    r = rng.standard_normal((N, M)).astype(np.float32)
    r0 = r.astype(np.float64)
    y = r if in_place else np.full((N, M), np.nan, np.float32)
    compiled.run([x, r], [y])
    return x.astype(np.float64), r0, y


def test_the_proven_kernel_is_right_in_place(rng):
    x, r, y = _run(residual, True, rng)
    np.testing.assert_allclose(y, 2 * x + r, rtol=1e-6, atol=1e-6)
    x, r, y = _run(residual, False, rng)
    np.testing.assert_allclose(y, 2 * x + r, rtol=1e-6, atol=1e-6)


def test_a_refused_kernel_is_wrong_in_place(rng):
    x, r, y = _run(shifted, True, rng)
    assert not np.allclose(y, x + np.roll(r, -1, axis=0), rtol=1e-5, atol=1e-5)


def test_the_pair_is_printed_without_restrict():
    from hidet_framework.driver.targets import resolve_compile_target
    from hidet_framework.runtime.compiled_task import generate_source

    target = resolve_compile_target("cpu")
    source = generate_source(with_output_aliases(_task(summed), 2, 1), target.backend, target.target)
    assert "void summed(float* x, float* __restrict__ r, float* y)" in source  # x and y proven, r not
    source = generate_source(_task(residual), target.backend, target.target)
    assert "float* __restrict__ x, float* __restrict__ r, float* __restrict__ y" in source


def test_the_pair_is_passed_without_restrict_to_the_thread_pool_task():
    from hidet_framework.driver.targets import resolve_compile_target
    from hidet_framework.lang import parallel
    from hidet_framework.runtime.compiled_task import generate_source

    rows, cols = 512, 520  # enough work for the pool (hidet_plugin_cpu/parallel.py)

    @script
    def big(x: f32[rows, cols], r: f32[rows, cols], y: f32[rows, cols]):
        attrs.func_kind = "cpu_kernel"
        for i in parallel(rows):
            for j in range(cols):
                y[i, j] = x[i, j] + r[i, (j + 1) % cols]   # r at another index: only x and y proven

    target = resolve_compile_target("cpu")
    source = generate_source(with_output_aliases(_task(big), 2, 1), target.backend, target.target)
    head = source.split("void big_par0(")[1].split(")")[0]
    assert "__restrict__ x" not in head and "__restrict__ y" not in head and "__restrict__ r" in head, head


def test_the_in_place_store_loop_is_marked_ivdep():
    """Printed without restrict, the pair makes gcc version the store loop on an address
    test whose overlap side (y == r: in place) is scalar; the proof makes `#pragma GCC
    ivdep` true there, so the innermost loop storing into the pair gets it, and nothing
    else does (no outer loop, no kernel without a pair)."""
    from hidet_framework.driver.targets import resolve_compile_target
    from hidet_framework.lang import parallel
    from hidet_framework.runtime.compiled_task import generate_source

    target = resolve_compile_target("cpu")
    source = generate_source(with_output_aliases(_task(residual), 2, 1), target.backend, target.target)
    assert "float* r, float* y" in source and source.count("#pragma GCC ivdep") == 1, source
    assert source.split("#pragma GCC ivdep")[1].lstrip().startswith(f"for (int32_t j = 0; j < {M}; ++j)"), source
    assert "ivdep" not in generate_source(_task(residual), target.backend, target.target)

    @script
    def staged(x: f32[N, M], r: f32[N, M], y: f32[N, M]):
        attrs.func_kind = "cpu_kernel"
        for i in range(N):
            tmp = local_tensor(f32, [M])
            for j in range(M):
                tmp[j] = x[i, j] * 2.0                   # a store, but not into the pair
            for j in range(M):
                y[i, j] = tmp[j] + r[i, j]

    source = generate_source(with_output_aliases(_task(staged), 2, 1), target.backend, target.target)
    assert source.count("#pragma GCC ivdep") == 1 and "tmp[j_1]" in source.split("#pragma GCC ivdep")[1] \
        and "tmp[j] = " not in source.split("#pragma GCC ivdep")[1], source
    rows, cols = 512, 520

    @script
    def wide(x: f32[rows, cols], r: f32[rows, cols], y: f32[rows, cols]):
        attrs.func_kind = "cpu_kernel"
        for i in parallel(rows):
            for j in range(cols):
                y[i, j] = x[i, j] + r[i, j]

    source = generate_source(with_output_aliases(_task(wide), 2, 1), target.backend, target.target)
    body = source.split("void wide_par0(")[2] if source.count("void wide_par0(") > 1 else source.split("void wide_par0(")[1]
    assert source.count("#pragma GCC ivdep") == 1 and "#pragma GCC ivdep" in body, source
    assert body.split("#pragma GCC ivdep")[1].lstrip().startswith("for (int32_t j"), body
