"""The operators of hidet_plugin_ops/activations.py against float64 numpy references:
rounding, trigonometry, sign, reciprocal, NaN/inf tests, parametric activations,
prelu and mod; odd sizes, both float widths, integers where they apply."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import symbol

FLOATS = ["float32", "float16"]


def _round_half_even(v):
    return np.round(v)  # numpy rounds half to even


UNARY = {
    "floor": (np.floor, (-4, 4)),
    "ceil": (np.ceil, (-4, 4)),
    "sin": (np.sin, (-6, 6)),
    "cos": (np.cos, (-6, 6)),
    "reciprocal": (lambda v: 1 / v, (0.1, 4)),
    "hard_swish": (lambda v: v * np.clip(v / 6 + 0.5, 0, 1), (-5, 5)),
    "softplus": (lambda v: np.log1p(np.exp(-np.abs(v))) + np.maximum(v, 0), (-30, 30)),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_against_numpy(name, dtype, rand, runner):
    reference, (low, high) = UNARY[name]
    x = symbol((3, 7, 5), dtype)
    a = rand(x.shape, dtype, low, high)
    out, = runner.run(getattr(ops, name)(x), {x: a})
    runner.assert_close(out, reference(a.astype(np.float64)), dtype)


def test_round_is_half_to_even(rand, runner):
    x = symbol((2, 13), "float32")
    a = rand(x.shape, "float32", -5, 5)
    a.reshape(-1)[:10] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5, 0.49999997, 2.5000002]
    out, = runner.run(ops.round(x), {x: a})
    runner.assert_close(out, _round_half_even(a.astype(np.float64)), "float32", tol=0)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_sign(dtype, rand, runner):
    x = symbol((5, 11), dtype)
    a = rand(x.shape, dtype, -3, 3)
    a.reshape(-1)[:3] = 0
    out, = runner.run(ops.sign(x), {x: a})
    runner.assert_close(out, np.sign(a.astype(np.float64)), dtype)


def test_integers_keep_their_dtype_through_floor_and_ceil(rand, runner):
    x = symbol((7,), "int32")
    a = rand(x.shape, "int32", -9, 9)
    y = ops.floor(ops.ceil(x))
    assert y.dtype.name == "int32"
    out, = runner.run(y, {x: a})
    runner.assert_close(out, a, "int32")


def test_isnan_and_isinf(rand, runner):
    x = symbol((3, 7), "float32")
    a = rand(x.shape, "float32")
    a.reshape(-1)[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    outs = runner.run([ops.isnan(x), ops.isinf(x), ops.isinf(x, detect_negative=False),
                       ops.isinf(x, detect_positive=False)], {x: a})
    for out, want in zip(outs, [np.isnan(a), np.isinf(a), np.isposinf(a), np.isneginf(a)]):
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_parametric_activations(dtype, rand, runner):
    x = symbol((4, 9), dtype)
    a = rand(x.shape, dtype, -4, 4)
    v = a.astype(np.float64)
    cases = [
        (ops.elu(x, alpha=0.7), np.where(v > 0, v, 0.7 * (np.exp(v) - 1))),
        (ops.leaky_relu(x, alpha=0.13), np.where(v < 0, 0.13 * v, v)),
        (ops.hard_sigmoid(x, alpha=0.3, beta=0.4), np.clip(0.3 * v + 0.4, 0, 1)),
    ]
    outs = runner.run([c[0] for c in cases], {x: a})
    for out, (_, want) in zip(outs, cases):
        runner.assert_close(out, want, dtype)


def test_prelu_broadcasts_the_slope(rand, runner):
    x, s = symbol((2, 3, 5, 7), "float32"), symbol((3, 1, 1), "float32")
    a, b = rand(x.shape, "float32"), rand(s.shape, "float32", 0, 1)
    out, = runner.run(ops.prelu(x, s), {x: a, s: b})
    v = a.astype(np.float64)
    runner.assert_close(out, np.where(v < 0, b * v, v), "float32")


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
@pytest.mark.parametrize("fmod", [False, True])
def test_mod_signs(dtype, fmod, rand, runner):
    x, y = symbol((5, 13), dtype), symbol((13,), dtype)
    a = rand(x.shape, dtype, -20, 20)
    b = rand(y.shape, dtype, 1, 7) * np.where(np.arange(13) % 2, 1, -1).astype(dtype)
    out, = runner.run(ops.mod(x, y, fmod=fmod), {x: a, y: b})
    reference = np.fmod if fmod else np.mod
    runner.assert_close(out, reference(a.astype(np.float64), b.astype(np.float64)), dtype, tol=1e-5)


def test_mod_refuses_a_non_bool_fmod():
    with pytest.raises(Exception, match="fmod must be a bool"):
        ops.mod(symbol((3,), "int32"), symbol((3,), "int32"), fmod="yes")
