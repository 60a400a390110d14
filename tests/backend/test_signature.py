"""Argument checks at the call boundary: clear errors naming function, parameter,
expected and given."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.backend.signature import FunctionSignature, ParamSpec, check_args, numpy_dtype

SIG = FunctionSignature("scale", [
    ParamSpec("x", "tensor", "float32", (None, 7)),
    ParamSpec("y", "tensor", "float32", None),
    ParamSpec("alpha", "scalar", "float32"),
    ParamSpec("n", "scalar", "int32"),
])


def good_args():
    return [np.zeros((3, 7), np.float32), np.zeros(5, np.float32), 1.5, 3]


def test_good_arguments_pass():
    check_args(SIG, good_args())
    args = good_args()
    args[2], args[3] = 2, np.int64(4)  # an int for a float, a numpy integer
    check_args(SIG, args)


@pytest.mark.parametrize("index, value, exc, words", [
    (0, np.zeros((3, 7), np.float64), TypeError, ["scale()", "'x'", "float32", "float64"]),
    (0, np.zeros((3, 8), np.float32), ValueError, ["'x'", "(?, 7)", "(3, 8)"]),
    (0, np.zeros((7,), np.float32), ValueError, ["'x'", "(?, 7)", "(7,)"]),
    (0, np.zeros((7, 3), np.float32).T, ValueError, ["'x'", "C-contiguous"]),
    (0, [[0.0] * 7] * 3, TypeError, ["'x'", "list"]),
    (1, 3.0, TypeError, ["'y'", "float"]),
    (2, "1.5", TypeError, ["'alpha'", "str"]),
    (2, np.zeros(1, np.float32), TypeError, ["'alpha'", "ndarray"]),
    (3, 1.5, TypeError, ["'n'", "int32", "float"]),
    (3, 2**31, ValueError, ["'n'", "int32", str(2**31)]),
    (3, True, TypeError, ["'n'", "bool"]),
])
def test_bad_arguments_are_named(index, value, exc, words):
    args = good_args()
    args[index] = value
    with pytest.raises(exc) as info:
        check_args(SIG, args)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_arity_error_lists_parameters():
    with pytest.raises(TypeError, match=r"scale\(\) takes 4 argument\(s\) \(x, y, alpha, n\), got 2"):
        check_args(SIG, good_args()[:2])


def test_bfloat16_travels_as_uint16():
    sig = FunctionSignature("f", [ParamSpec("x", "tensor", "bfloat16", (4,))])
    assert numpy_dtype("bfloat16") == np.uint16
    check_args(sig, [np.zeros(4, np.uint16)])
    with pytest.raises(TypeError, match="bfloat16"):
        check_args(sig, [np.zeros(4, np.float16)])


def test_spec_validation():
    with pytest.raises(ValueError):
        ParamSpec("x", "tensor", "float33")
    with pytest.raises(ValueError):
        ParamSpec("x", "pointer", "float32")
    with pytest.raises(ValueError):
        ParamSpec("x", "tensor", "float32", (-1,))


def test_json_round_trip():
    assert FunctionSignature.from_json(SIG.to_json()) == SIG
    assert "scale(x: C-contiguous float32 array of shape (?, 7)" in str(SIG)
