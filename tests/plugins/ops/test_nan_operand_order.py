"""NaN inputs through kernels whose min/max had a constant on the left, compiled and
evaluated, against float64 references. The IR's ``max(a, b)`` is numpy's ``maximum``
(session 14: a NaN operand is the result, either side; a tie of -0.0 and 0.0 gives `b`).
Before, it was ``b > a ? b : a``, and the simplifier used to move a constant to the right
of a float min/max (``maximum(2.5, x)`` printed as ``hidet_max_float32(x, 2.5f)``), so
compiled code and the definition disagreed on a NaN x; both orders now give NaN, and the
simplifier still keeps a float min/max's operand order (the tie's sign depends on it).
hard_sigmoid / hard_swish give NaN for NaN (ONNX)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import symbol

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5]


def ir_max(a, b):
    return np.maximum(a, b)


def ir_min(a, b):
    return np.minimum(a, b)


def _input(rand, shape):
    a = rand(shape, low=-4.0, high=4.0)
    a.reshape(-1)[:len(SPECIALS)] = SPECIALS          # each special value at least once
    a.reshape(-1)[-1] = np.nan
    return a


def _both(runner, out, feed):
    """The compiled result and the evaluator's (the unlowered definition)."""
    if runner.compiled_path_problem("cpu") is not None:
        pytest.skip(runner.compiled_path_problem("cpu"))
    return runner.run_compiled(out, feed)[0], runner.run_with_evaluator(out, feed)[0]


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("constant_first", [True, False])
def test_scalar_min_max_keep_the_definition(rand, runner, kind, constant_first):
    x = symbol((3, 37), "float32")
    a = _input(rand, (3, 37))
    c = 2.5
    op, ref = (ops.maximum, ir_max) if kind == "max" else (ops.minimum, ir_min)
    out = op(c, x) if constant_first else op(x, c)
    expected = ref(np.float64(c), a.astype(np.float64)) if constant_first else ref(a.astype(np.float64), np.float64(c))
    assert np.isnan(expected).any() and np.array_equal(np.isnan(expected), np.isnan(a))  # either order
    for got in _both(runner, out, {x: a}):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.astype(np.float64), expected)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))  # -0.0 vs 0.0 as numpy


@pytest.mark.parametrize("name", ["hard_sigmoid", "hard_swish"])
def test_hard_activations_give_nan_for_nan(rand, runner, name):
    x = symbol((5, 29), "float32")
    a = _input(rand, (5, 29))
    v = a.astype(np.float64)
    if name == "hard_sigmoid":
        out, expected = ops.hard_sigmoid(x, alpha=0.3, beta=0.4), np.clip(0.3 * v + 0.4, 0, 1)
    else:
        with np.errstate(invalid="ignore"):  # -inf * 0
            out, expected = ops.hard_swish(x), v * np.clip(v / 6 + 0.5, 0, 1)
    assert np.isnan(expected[np.isnan(a)]).all()     # numpy (and ONNX): NaN in, NaN out
    for got in _both(runner, out, {x: a}):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))  # NaN exactly where numpy has it
        finite = ~np.isnan(expected)
        np.testing.assert_allclose(got[finite].astype(np.float64), expected[finite], rtol=1e-6, atol=1e-6)
