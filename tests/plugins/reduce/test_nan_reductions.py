"""A NaN in a reduced row (session 14), as numpy: reduce_max / reduce_min give NaN,
argmax / argmin the first NaN's position (the last one's with select_last_index, where
numpy has no such flag), a softmax row holding a NaN is all NaN. Rows with a NaN first,
in the middle, last, twice, everywhere, beside +inf, a row of -inf, rows of +-inf alone,
clean rows (exact as before), NaN sprinkled; rows and columns; odd and prime extents.

- every space-1 candidate of the CPU row templates on this machine's ISA and on AVX2
  (gcc told -mno-avx512f), outputs poisoned with a value no row gives;
- the operators through hf.compile on the CPU (the templates; softmax over axis 0: the
  auto-scheduler's kernel), on the evaluator (the compute definitions), and with
  ``-m cuda`` on the GPU (`target` fixture); float32 and float16.
"""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target

POISON = 12345.0


def nan_rows(rng, rows, n):
    """rows x n float32, a pattern per row (rows 0..9), NaN sprinkled in the others."""
    x = rng.uniform(-3, 3, (rows, n)).astype(np.float32)
    x[1, 0] = np.nan
    x[2, n // 2] = np.nan
    x[3, n - 1] = np.nan
    x[4] = np.nan
    x[5, ::3], x[5, n // 3 + 1] = np.inf, np.nan
    x[6] = -np.inf
    x[7, 2], x[7, n - 2] = np.nan, np.nan
    x[8, 1], x[8, n - 3] = np.inf, -np.inf
    x[9, :] = 1.5                                    # all tied: the first (last) position
    x[10:][rng.random((rows - 10, n)) < 0.03] = np.nan
    return x


def _arg_last(e, axis, kind):
    """select_last_index: the last NaN where a row has one, else the last extreme."""
    e = np.moveaxis(e, axis, -1)
    n = e.shape[-1]
    flipped = e[..., ::-1]
    first = np.argmax(flipped, -1) if kind == "max" else np.argmin(flipped, -1)
    return n - 1 - first


OPS = {  # name -> (builder(x, axis), reference(e, axis))
    "reduce_max": (lambda x, a: hf.ops.reduce_max(x, a), lambda e, a: np.max(e, a)),
    "reduce_min": (lambda x, a: hf.ops.reduce_min(x, a), lambda e, a: np.min(e, a)),
    "argmax": (lambda x, a: hf.ops.argmax(x, a), lambda e, a: np.argmax(e, a)),
    "argmin": (lambda x, a: hf.ops.argmin(x, a), lambda e, a: np.argmin(e, a)),
    "argmax_last": (lambda x, a: hf.ops.argmax(x, a, select_last_index=True),
                    lambda e, a: _arg_last(e, a, "max")),
    "argmin_last": (lambda x, a: hf.ops.argmin(x, a, select_last_index=True),
                    lambda e, a: _arg_last(e, a, "min")),
    "softmax": (lambda x, a: hf.ops.softmax(x, a), lambda e, a: _softmax(e, a)),
}


def _softmax(e, axis):
    z = np.exp(e - e.max(axis, keepdims=True))
    return z / z.sum(axis, keepdims=True)


def _input(rng, axis, n):
    x = nan_rows(rng, 17, n)
    return x if axis == -1 else np.ascontiguousarray(x.T)


def test_the_patterns_are_what_numpy_says():
    x = nan_rows(np.random.default_rng(0), 17, 11)
    with np.errstate(invalid="ignore"):
        assert list(np.isnan(np.max(x, -1))[:10]) == [False, True, True, True, True, True, False, True, False, False]
    assert list(np.argmax(x, -1)[1:5]) == [0, 5, 10, 0] and np.argmax(x[7]) == 2 and _arg_last(x, -1, "max")[7] == 9
    assert _arg_last(x, -1, "min")[9] == 10 and np.argmin(x[9]) == 0


@pytest.mark.parametrize("n,isa", [(7, "native"), (71, "native"), (71, "avx2")])   # 71: lane blocks + a tail
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("name", list(OPS))
def test_every_cpu_candidate(rng, name, n, axis, isa, monkeypatch):
    from hidet_framework.extension import plugin_host
    from hidet_framework.runtime.compiled_task import compile_scheduled

    backend = plugin_host().backend_for("cpu")
    native = backend.detect_target()
    target = native
    if isa == "avx2":
        from hidet_plugin_cpu import build

        monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
        target = Target("cpu", native.arch, {**native.properties, "vector_bits": 256})
    build_op, reference = OPS[name]
    x = _input(rng, axis, n)
    y = build_op(hf.symbol(x.shape, "float32"), axis)
    op = y.producer
    (template,) = plugin_host().templates.templates_for(op.name, "cpu")
    if not template.applies(op.task, op.attributes):
        assert name == "softmax" and axis == 0      # the auto-scheduler's (test_operators_through_compile)
        return
    with np.errstate(invalid="ignore"):
        ref = reference(x.astype(np.float64), axis)
    integer = y.dtype.is_integer()
    for params in template.space(target, 1):
        compiled = compile_scheduled(op.task, template.build(op.task, op.attributes, params, target), backend, target)
        out = np.full(y.shape, -7 if integer else POISON, np.dtype(y.dtype.numpy_name))
        compiled.run([x], [out])
        what = f"{name} n={n} axis={axis} {isa} {params}"
        if integer:
            np.testing.assert_array_equal(out, ref, err_msg=what)
        else:
            assert not (out == POISON).any(), f"{what}: an output element was never written"
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6, err_msg=what)   # NaN where ref's


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_operators_through_compile(rng, target, dtype):
    """All of OPS on rows and columns in one graph, on the `target` fixture's device."""
    x = nan_rows(rng, 17, 37).astype(dtype)
    xs = hf.symbol(x.shape, dtype)
    names = [(name, axis) for name in OPS for axis in (-1, 0)]
    outs = [OPS[name][0](xs, axis) for name, axis in names]
    fn = hf.compile(hf.trace(outs, inputs=[xs]), target=target, space=0)
    got = fn(x)
    e = x.astype(np.float64)
    for (name, axis), g in zip(names, got):
        with np.errstate(invalid="ignore"):
            ref = OPS[name][1](e, axis)
        g = np.asarray(g)
        what = f"{name} axis={axis} {dtype} {target}"
        if g.dtype.kind in "iu":
            np.testing.assert_array_equal(g, ref, err_msg=what)
        else:
            tol = 4e-3 if dtype == "float16" else 1e-5
            np.testing.assert_allclose(g.astype(np.float64), ref, rtol=tol, atol=tol, err_msg=what)


def test_the_definitions_on_the_evaluator(rng):
    """The compute definitions (reductions.py: argmax's second stage matches a NaN)."""
    x = nan_rows(rng, 11, 13)
    xs = hf.symbol(x.shape, "float32")
    names = [(name, axis) for name in OPS for axis in (-1, 0)]
    fn = hf.compile(hf.trace([OPS[n][0](xs, a) for n, a in names], inputs=[xs]), target="evaluator")
    for (name, axis), g in zip(names, fn(x)):
        with np.errstate(invalid="ignore"):
            ref = OPS[name][1](x.astype(np.float64), axis)
        np.testing.assert_allclose(np.asarray(g, np.float64), ref, rtol=1e-5, atol=1e-6, err_msg=f"{name} {axis}")
