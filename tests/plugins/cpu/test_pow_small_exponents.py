"""pow with a constant exponent of 2, 3 or 4 is computed by multiplications
(hidet_plugin_ops/binary.py): within 2 ULP of the float64 power on fresh random
inputs of a prime length, IEEE results for infinities, NaN, zeros and overflow; other
exponents (non-integer, a 1-element but not 0-d tensor, a graph input) keep pow."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf


def _compiled(exponent, n):
    x = hf.symbol((n,), "float32")
    y = hf.ops.pow(x, exponent)
    return y.producer.attributes.get("exponent"), hf.compile(hf.trace(y, inputs=[x]), target="cpu", space=0)


def _ulps(got, want):
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32)
    scale = np.maximum(np.abs(np.spacing(np.abs(want32))).astype(np.float64), 2.0 ** -149)
    finite = np.isfinite(want32)
    return np.abs(got.astype(np.float64)[finite] - want[finite]) / scale[finite]


@pytest.mark.parametrize("exponent", [2, 3, 4, 3.0, "tensor3", "tensor2"])
def test_small_powers_by_multiplication(rng, exponent):
    value = {"tensor3": 3.0, "tensor2": 2.0}.get(exponent, exponent)
    if isinstance(exponent, str):
        exponent = hf.constant(np.array(value, np.float32))
    n = 10007
    kind, fn = _compiled(exponent, n)
    assert kind == int(value)
    a = (rng.standard_normal(n) * rng.choice([1e-12, 1e-3, 1.0, 1e3, 1e12], n)).astype(np.float32)
    a[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 3e38, -3e38, 1e-40]
    out = np.full(n, np.nan, np.float32)
    got = fn(a, out=out)
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), value)
    assert _ulps(got, want).max() <= 2.0
    with np.errstate(all="ignore"):
        special = want[:8].astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got[:8]), np.isnan(special))
    both = ~np.isnan(special)
    np.testing.assert_array_equal(got[:8][both], special[both])


@pytest.mark.parametrize("exponent", [2.5, 1.0, 5.0, "one_element", "input"])
def test_other_exponents_keep_pow(rng, exponent):
    x = hf.symbol((31,), "float32")
    if exponent == "one_element":
        b = hf.constant(np.array([3.0], np.float32))   # shape (1,): not 0-d
    elif exponent == "input":
        b = hf.symbol((), "float32")
    else:
        b = exponent
    y = hf.ops.pow(x, b)
    assert "exponent" not in y.producer.attributes
    inputs = [x] + ([b] if exponent == "input" else [])
    fn = hf.compile(hf.trace(y, inputs=inputs), target="cpu", space=0)
    a = np.abs(rng.standard_normal(31)).astype(np.float32) + 0.1
    args = [a] + ([np.array(3.0, np.float32)] if exponent == "input" else [])
    value = 3.0 if exponent in ("one_element", "input") else exponent
    np.testing.assert_allclose(fn(*args), np.power(a.astype(np.float64), value), rtol=1e-5)
