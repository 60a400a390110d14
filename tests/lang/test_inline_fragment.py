"""Inline fragments (hidet_framework.lang.inline_fragment): a script function's body
written where it is called, with its parameters replaced by the arguments; no call and
no function of its own in the module; refused on a wrong arity, a scalar of another
type, and a second use (the tracer reports each as a ScriptError at the call's line)."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.analysis.evaluator import evaluate_function
from hidet_framework.ir.expr import Call
from hidet_framework.ir.functors import collect
from hidet_framework.ir.stmt import ForStmt
from hidet_framework.lang import ScriptError, f32, i32, inline_fragment, script, script_module

N = 7


def _scale_row():
    @inline_fragment
    @script
    def scale_row(out: f32[N * N], row: i32, factor: f32):
        for j in range(N):
            out[row * N + j] = out[row * N + j] * factor + cast_row(row)

    return scale_row


def cast_row(row):  # a host helper inside the fragment: traced with the fragment
    return row * 1.0


def test_the_body_is_written_in_place_with_the_arguments():
    fragment = _scale_row()

    @script
    def kernel(out: f32[N * N], factor: f32):
        for i in range(N):
            fragment(out, i, factor)

    module = script_module(kernel)
    assert list(module.functions) == ["kernel"]                     # no function of its own
    assert not collect(kernel.ir.body, Call)                        # and no call
    assert len(collect(kernel.ir.body, ForStmt)) == 2               # its loop inside the kernel's
    rng = np.random.default_rng()
    a = rng.standard_normal(N * N).astype(np.float32)
    out = a.copy()
    evaluate_function(kernel.ir, out, np.float32(2.5), module=module)
    want = a.reshape(N, N) * np.float32(2.5) + np.arange(N, dtype=np.float32)[:, None]
    np.testing.assert_allclose(out.reshape(N, N), want, rtol=1e-6)


def test_wrong_arity_and_scalar_type_are_refused():
    fragment = _scale_row()
    with pytest.raises(ScriptError, match=r"TypeError: fragment scale_row takes 3 argument\(s\), got 2"):
        @script
        def short(out: f32[N * N]):
            fragment(out, 0)
    fragment = _scale_row()
    with pytest.raises(ScriptError, match=r"TypeError: fragment scale_row: factor is float32, got int32"):
        @script
        def wrong(out: f32[N * N], k: i32):
            fragment(out, 0, k)


def test_a_fragment_is_written_once():
    fragment = _scale_row()
    with pytest.raises(ScriptError, match="RuntimeError: fragment scale_row is already written into a kernel; build a fresh one"):
        @script
        def twice(out: f32[N * N]):
            fragment(out, 0, 1.0)
            fragment(out, 1, 1.0)
