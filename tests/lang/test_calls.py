"""Calls: other script functions, primitives, casts, host (trace-time) Python functions."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.ir import dtypes
from hidet_framework.analysis.evaluator import evaluate_function
from hidet_framework.ir.expr import Call, Cast, Constant
from hidet_framework.ir.primitives import PrimitiveFunction
from hidet_framework.lang import attrs, cast, f16, f32, i32, script, script_module

rng = np.random.default_rng()


@script
def square(x: f32) -> f32:
    attrs.func_kind = "device"
    return x * x


@script
def sum_of_squares(a: f32, b: f32) -> f32:
    attrs.func_kind = "device"
    return square(a) + square(b)


@script
def hypot2_all(n: i32, a: f32[n], b: f32[n], out: f32[n]):
    for i in range(n):
        out[i] = sum_of_squares(a[i], b=b[i])


def test_nested_script_calls_and_module_order():
    call = hypot2_all.ir.body.body.value
    assert isinstance(call, Call) and call.func == "sum_of_squares" and call.ret_type is dtypes.float32
    mod = script_module(hypot2_all)
    assert list(mod.functions) == ["square", "sum_of_squares", "hypot2_all"]  # callees first
    a, b = rng.standard_normal(9).astype("float32"), rng.standard_normal(9).astype("float32")
    out = np.full(9, np.nan, "float32")
    evaluate_function(hypot2_all.ir, 9, a, b, out, module=mod)
    np.testing.assert_allclose(out, a * a + b * b, rtol=1e-6)


def test_call_arguments_are_converted_like_c():
    @script
    def caller(x: f16) -> f32:
        return square(x) + square(2)

    args = [c.args[0] for c in (caller.ir.body.value.a, caller.ir.body.value.b)]
    assert isinstance(args[0], Cast) and args[0].dtype is dtypes.float32
    assert isinstance(args[1], Constant) and args[1].dtype is dtypes.float32


def test_primitive_calls_and_host_objects_with_ir_attributes():
    fast_exp = PrimitiveFunction("test_lang_fast_exp", "float32", emit={"cpu": "expf({0})"})

    class ThreadIdx:  # what a backend plugin exports: attributes holding IR expressions
        x = PrimitiveFunction("test_lang_tid_x", "int32")()

    tid = ThreadIdx()

    @script
    def f(a: f32[4], out: f32[4]):
        out[tid.x] = fast_exp(a[tid.x])

    store = f.ir.body
    assert isinstance(store.value, Call) and store.value.func == "test_lang_fast_exp"
    a, out = rng.standard_normal(4).astype("float32"), np.full(4, np.nan, "float32")
    evaluate_function(f.ir, a, out, primitives={"test_lang_fast_exp": np.exp, "test_lang_tid_x": lambda: 2})
    assert np.isnan(out[[0, 1, 3]]).all() and np.isclose(out[2], np.exp(a[2]))


def test_cast_forms():
    @script
    def f(x: f32) -> i32:
        h = cast(x, f16)
        g = cast(h, "float32")
        half = f16(0.5)        # a typed constant
        k = int(g + cast(half, f32))
        return k

    assert evaluate_function(f.ir, 3.75) == 4
    h_decl, _, half_decl = f.ir.body.stmts[:3]
    assert h_decl.var.type is dtypes.float16 and half_decl.var.type is dtypes.float16


def test_host_helpers_run_at_trace_time():
    def tile_of(n):            # returns an int
        return n // 4

    def scaled(e, k):          # returns an IR expression built from an IR argument
        return e * k

    n = 16

    @script
    def f(a: f32[n]):
        for i in range(tile_of(n)):
            a[i] = scaled(a[i], 2.0)

    assert f.ir.body.extent.value == 4
    a = rng.standard_normal(16).astype("float32")
    want = a.copy()
    want[:4] *= 2
    evaluate_function(f.ir, a)
    np.testing.assert_allclose(a, want, rtol=1e-6)


def test_host_tuples_and_static_loops_over_them():
    offsets = (0, 3, 5)

    @script
    def f(out: i32[6]):
        for k, off in ((0, offsets[0]), (1, offsets[1]), (2, offsets[2])):
            out[off] = k + 10

    out = np.zeros(6, "int32")
    evaluate_function(f.ir, out)
    assert out.tolist() == [10, 0, 0, 11, 0, 12]


def test_script_function_is_printable_and_not_directly_callable():
    assert "def square(x: f32) -> f32:  # device" in str(square)
    with pytest.raises(TypeError, match="evaluate_function"):
        square(1.0)


def test_module_rejects_two_functions_with_one_name():
    def make(k):
        @script
        def g(a: f32[k]):
            pass
        return g

    with pytest.raises(ValueError, match="attrs.func_name"):
        script_module(make(2), make(3))
