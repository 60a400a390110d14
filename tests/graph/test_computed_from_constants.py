"""Tensor.computed_from_constants: what the CPU packing rules (conv weights, matmul B)
ask before packing an operand at compile time."""
from __future__ import annotations

import numpy as np

import hidet_framework as hf


def test_constants_and_what_is_computed_from_them_only():
    w = hf.constant(np.ones((3, 4), np.float32))
    x = hf.symbol((3, 4), "float32", name="x")
    assert w.computed_from_constants()
    assert (w * w + w).computed_from_constants()
    assert not x.computed_from_constants()
    assert not (w + x).computed_from_constants()  # one input that is not constant is enough


def test_the_look_up_stops_at_its_depth():
    t = hf.constant(np.ones((2,), np.float32))
    for _ in range(5):
        t = t + t
    assert t.computed_from_constants(max_depth=5)       # 5 producers, then the constant
    assert not t.computed_from_constants(max_depth=4)
    assert t.computed_from_constants()                  # the default looks 65 up
