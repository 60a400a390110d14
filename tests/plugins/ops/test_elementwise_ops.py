"""Elementwise operators against numpy: unary math and activations, broadcasting
binary arithmetic, weak Python scalars, comparisons, logic, where, clip, cast."""
from __future__ import annotations

import math

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import symbol

FLOATS = ["float32", "float16"]
_erf = np.vectorize(math.erf)

# name -> (numpy reference on float64, input range)
UNARY = {
    "neg": (lambda v: -v, (-3, 3)),
    "abs": (np.abs, (-3, 3)),
    "relu": (lambda v: np.maximum(v, 0), (-3, 3)),
    "exp": (np.exp, (-3, 3)),
    "log": (np.log, (0.05, 5)),
    "sqrt": (np.sqrt, (0.0, 5)),
    "rsqrt": (lambda v: 1 / np.sqrt(v), (0.05, 5)),
    "erf": (_erf, (-3, 3)),
    "tanh": (np.tanh, (-3, 3)),
    "sigmoid": (lambda v: 1 / (1 + np.exp(-v)), (-6, 6)),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_against_numpy(name, dtype, rand, runner):
    reference, (low, high) = UNARY[name]
    x = symbol((3, 5, 7), dtype)
    a = rand(x.shape, dtype, low, high)
    y = getattr(ops, name)(x)
    assert y.shape == x.shape and y.dtype is x.dtype
    out, = runner.run(y, {x: a})
    runner.assert_close(out, reference(a.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_both_forms(approximate, dtype, rand, runner):
    x = symbol((2, 13), dtype)
    a = rand(x.shape, dtype, -4, 4)
    v = a.astype(np.float64)
    if approximate == "none":
        ref = 0.5 * v * (1 + _erf(v / math.sqrt(2)))
    else:
        ref = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    out, = runner.run(ops.gelu(x, approximate=approximate), {x: a})
    runner.assert_close(out, ref, dtype, tol=None if dtype == "float16" else 1e-5)


def test_unary_math_of_integers_gives_float32(rand, runner):
    x = symbol((4, 3), "int32")
    a = rand(x.shape, "int32", 0, 9)
    y = ops.sqrt(x)
    assert y.dtype.name == "float32"
    out, = runner.run(y, {x: a})
    runner.assert_close(out, np.sqrt(a.astype(np.float64)), "float32")


def test_float64_math_stays_float64(rand, runner):
    x = symbol((5,), "float64")
    a = rand(x.shape, "float64", -2, 2)
    out, = runner.run(ops.tanh(ops.exp(x)), {x: a})
    runner.assert_close(out, np.tanh(np.exp(a)), "float64")


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}
# (shape of a, shape of b): same shape, trailing broadcast, both sides broadcast, rank-0
SHAPES = [((3, 5), (3, 5)), ((2, 3, 5), (5,)), ((4, 1, 7), (3, 1)), ((1, 6), ()), ((), (2, 3))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcasting_against_numpy(name, shapes, dtype, rand, runner):
    x, y = symbol(shapes[0], dtype), symbol(shapes[1], dtype)
    a, b = rand(x.shape, dtype, 0.5, 3), rand(y.shape, dtype, -3, 3)
    if name == "div":
        b = np.where(np.abs(b) < 0.25, 0.5, b).astype(dtype)
    z = getattr(ops, name)(x, y)
    expected_shape = np.broadcast_shapes(shapes[0], shapes[1])
    assert z.shape == expected_shape
    out, = runner.run(z, {x: a, y: b})
    runner.assert_close(out, BINARY[name](a.astype(np.float64), b.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow(dtype, rand, runner):
    x, y = symbol((3, 4), dtype), symbol((4,), dtype)
    a, b = rand(x.shape, dtype, 0.2, 2), rand(y.shape, dtype, -2, 2)
    out, = runner.run(ops.pow(x, y), {x: a, y: b})
    runner.assert_close(out, np.power(a.astype(np.float64), b.astype(np.float64)), dtype, tol=5e-3 if dtype == "float16" else None)


def test_tensor_operators_and_same_input_twice(rand, runner):
    x = symbol((3, 4))
    a = rand(x.shape)
    y = (x * x - x / 2.0 + 1) * -x
    out, = runner.run(y, {x: a})
    a64 = a.astype(np.float64)
    runner.assert_close(out, (a64 * a64 - a64 / 2 + 1) * -a64, "float32")
    assert len(ops.mul(x, x).producer.inputs) == 1  # one buffer read twice


# -------------------------------------------------------------- weak Python scalars

@pytest.mark.parametrize("dtype, scalar, expected", [
    ("float16", 1.5, "float16"), ("float16", 2, "float16"), ("float32", 3, "float32"),
    ("int32", 2, "int32"), ("uint8", 3, "uint8"), ("int8", 1.5, "float32"),
    ("bool", 2, "int64"), ("bool", True, "bool"), ("float64", 0.5, "float64"),
])
def test_scalar_operand_dtype_rules(dtype, scalar, expected, rand, runner):
    x = symbol((2, 7), dtype)
    a = rand(x.shape, dtype, 0, 5)
    y = ops.add(x, scalar)
    assert y.dtype.name == expected
    out, = runner.run(y, {x: a})
    runner.assert_close(out, a.astype(np.float64) + scalar if expected != "bool" else a | scalar, expected)
    z = ops.sub(scalar, x)  # the scalar on the left
    assert z.dtype.name == expected


def test_scalar_that_does_not_fit_is_an_error():
    with pytest.raises(OverflowError, match="300 does not fit .*uint8"):
        ops.add(symbol((3,), "uint8"), 300)


def test_tensor_dtype_promotion_like_numpy(rand, runner):
    x, y = symbol((3,), "int8"), symbol((3,), "uint8")
    z = ops.add(x, y)
    assert z.dtype.name == np.result_type(np.int8, np.uint8).name == "int16"
    f = ops.mul(symbol((2,), "float16"), symbol((2,), "float32"))
    assert f.dtype.name == "float32"
    a, b = rand(x.shape, "int8", -100, 100), rand(y.shape, "uint8", 0, 250)
    out, = runner.run(z, {x: a, y: b})
    runner.assert_close(out, a.astype(np.int64) + b, "int16")


# -------------------------------------------------------------- integer division

@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_integer_division_modes(mode, rand, runner):
    x, y = symbol((4, 5), "int32"), symbol((5,), "int32")
    a = rand(x.shape, "int32", -20, 20)
    b = np.array([3, -4, 7, -2, 5], np.int32)
    z = ops.div(x, y, rounding_mode=mode)
    out, = runner.run(z, {x: a, y: b})
    if mode is None:
        runner.assert_close(out, a / b, "float32")
    elif mode == "trunc":
        runner.assert_close(out, np.trunc(a / b).astype(np.int64), "int32")
    else:
        runner.assert_close(out, np.floor_divide(a, b), "int32")


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_float_division_modes(mode, rand, runner):
    x = symbol((3, 7))
    a = rand(x.shape, "float32", -9, 9)
    out, = runner.run(ops.div(x, 2.5, rounding_mode=mode), {x: a})
    runner.assert_close(out, (np.trunc if mode == "trunc" else np.floor)(a.astype(np.float64) / 2.5), "float32")


# -------------------------------------------------------------- comparisons and logic

COMPARISONS = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
               "greater": np.greater, "greater_equal": np.greater_equal}


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparisons(name, dtype, rand, runner):
    x, y = symbol((3, 4), dtype), symbol((4,), dtype)
    a, b = rand(x.shape, dtype, -2, 2), rand(y.shape, dtype, -2, 2)
    a[0, :] = b  # some ties
    z = getattr(ops, name)(x, y)
    assert z.dtype.name == "bool"
    out, = runner.run(z, {x: a, y: b})
    runner.assert_close(out, COMPARISONS[name](a, b), "bool")


def test_comparison_with_scalar_promotes_integers(rand, runner):
    x = symbol((9,), "int32")
    a = rand(x.shape, "int32", -3, 3)
    out, = runner.run(ops.less(x, 0.5), {x: a})
    runner.assert_close(out, a < 0.5, "bool")


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical_binary(name, rand, runner):
    x, y = symbol((2, 3, 4), "bool"), symbol((3, 1), "int32")
    a, b = rand(x.shape, "bool"), rand(y.shape, "int32", -1, 1)
    out, = runner.run(getattr(ops, name)(x, y), {x: a, y: b})
    runner.assert_close(out, getattr(np, name)(a, b), "bool")


def test_logical_not(rand, runner):
    x = symbol((5, 3), "float32")
    a = rand(x.shape)
    a[0] = 0
    out, = runner.run(ops.logical_not(x), {x: a})
    runner.assert_close(out, np.logical_not(a), "bool")


# -------------------------------------------------------------- where, clip, cast

@pytest.mark.parametrize("dtype", FLOATS)
def test_where_broadcasting(dtype, rand, runner):
    c, x, y = symbol((3, 1), "bool"), symbol((1, 4), dtype), symbol((4,), dtype)
    ca, a, b = rand(c.shape, "bool"), rand(x.shape, dtype), rand(y.shape, dtype)
    out, = runner.run(ops.where(c, x, y), {c: ca, x: a, y: b})
    runner.assert_close(out, np.where(ca, a, b), dtype)


def test_where_with_scalars(rand, runner):
    c, x = symbol((2, 5), "bool"), symbol((5,), "float16")
    ca, a = rand(c.shape, "bool"), rand(x.shape, "float16")
    z = ops.where(c, x, 0.0)
    assert z.dtype.name == "float16"
    out, = runner.run(z, {c: ca, x: a})
    runner.assert_close(out, np.where(ca, a, 0.0), "float16")
    m = ops.where(c, 1.0, -1)
    assert m.dtype.name == "float32"
    out, = runner.run(m, {c: ca})
    runner.assert_close(out, np.where(ca, 1.0, -1.0), "float32")


@pytest.mark.parametrize("dtype", FLOATS + ["int32"])
def test_clip(dtype, rand, runner):
    x = symbol((4, 6), dtype)
    a = rand(x.shape, dtype, -5, 5)
    out, = runner.run(ops.clip(x, -1, 2), {x: a})
    runner.assert_close(out, np.clip(a, -1, 2), dtype)
    out, = runner.run(ops.clip(x, max=0), {x: a})
    runner.assert_close(out, np.minimum(a, 0), dtype)


def test_clip_with_tensor_bounds(rand, runner):
    x, lo = symbol((3, 4)), symbol((4,))
    a, la = rand(x.shape), rand(lo.shape, "float32", -1, 0)
    out, = runner.run(ops.clip(x, lo, 1.5), {x: a, lo: la})
    runner.assert_close(out, np.minimum(np.maximum(a, la), 1.5), "float32")


@pytest.mark.parametrize("src, dst", [("float32", "int32"), ("float32", "float16"), ("float16", "float32"),
                                      ("int32", "float32"), ("float32", "bool"), ("bool", "float32"),
                                      ("int64", "int8")])
def test_cast(src, dst, rand, runner):
    x = symbol((3, 5), src)
    a = rand(x.shape, src, -100, 100)
    if src.startswith("float"):
        a[0, 0] = 0
    y = ops.cast(x, dst)
    assert y.dtype.name == dst
    out, = runner.run(y, {x: a})
    runner.assert_close(out, a.astype(dst), dst, tol=0 if dst == "float32" else None)
