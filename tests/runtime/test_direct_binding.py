"""Compiled CPU graphs called without copies (hidet_framework/runtime/direct_binding.py):
contiguous numpy inputs are read where they lie, outputs are fresh arrays the kernels
write or the caller's ``out=`` arrays; everything else takes the copying path with the
same answers and errors. Every output is poisoned or fresh and checked against numpy
in float64."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.runtime.compiled_task import GraphInputError


@pytest.fixture(autouse=True)
def _needs_ops():
    for name in ("add", "relu", "mul", "exp"):
        if not hasattr(hf.ops, name):
            pytest.skip(f"needs the {name} operator")


def _two_outputs():
    x, y = hf.symbol((37, 11), "float32"), hf.symbol((37, 11), "float32")
    s = hf.ops.add(x, y)                  # an output that a later operator also reads
    r = hf.ops.relu(hf.ops.mul(s, y))
    return hf.compile(hf.trace([s, r, s, x], inputs=[x, y]), target="cpu", space=0)


def _want(a, b):
    s = a.astype(np.float64) + b
    return [s, np.maximum(s * b, 0), s, a]


def test_outputs_are_fresh_and_inputs_untouched(rng):
    fn = _two_outputs()
    a, b = rng.standard_normal((37, 11)).astype(np.float32), rng.standard_normal((37, 11)).astype(np.float32)
    a0, b0 = a.copy(), b.copy()
    first = fn(a, b)
    for got, want in zip(first, _want(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
    assert first[0] is not first[2] and not np.shares_memory(first[0], first[2])
    assert not np.shares_memory(first[3], a)               # an echoed input is a copy
    kept = [x.copy() for x in first]
    second = fn(b, a)                                      # a later call leaves earlier outputs alone
    for old, copy in zip(first, kept):
        assert np.array_equal(old, copy)
    for got, want in zip(second, _want(b, a)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_non_contiguous_and_read_only_inputs(rng):
    fn = _two_outputs()
    big = rng.standard_normal((37, 22)).astype(np.float32)
    a = big[:, ::2]                                        # strided: the copying path
    b = rng.standard_normal((37, 11)).astype(np.float32)
    b.setflags(write=False)                                # read-only: read in place, never written
    for got, want in zip(fn(a, b), _want(np.ascontiguousarray(a), b)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    fortran = np.asfortranarray(rng.standard_normal((37, 11)).astype(np.float32))
    for got, want in zip(fn(fortran, b), _want(fortran, b)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_out_arrays_are_written(rng):
    fn = _two_outputs()
    a, b = rng.standard_normal((37, 11)).astype(np.float32), rng.standard_normal((37, 11)).astype(np.float32)
    out = [np.full((37, 11), np.nan, np.float32) for _ in range(4)]
    got = fn(a, b, out=out)
    assert all(g is o for g, o in zip(got, out))
    for o, want in zip(out, _want(a, b)):
        np.testing.assert_allclose(o, want, rtol=1e-6, atol=1e-6)


def test_out_refusals(rng):
    fn = _two_outputs()
    a, b = rng.standard_normal((37, 11)).astype(np.float32), rng.standard_normal((37, 11)).astype(np.float32)
    good = [np.empty((37, 11), np.float32) for _ in range(4)]
    with pytest.raises(GraphInputError, match="out= takes 4 arrays"):
        fn(a, b, out=good[:3])
    with pytest.raises(GraphInputError, match=r"out\[1\] must be a writable C-contiguous numpy array float32\[37, 11\]"):
        fn(a, b, out=[good[0], np.empty((37, 11), np.float64), good[2], good[3]])
    read_only = np.empty((37, 11), np.float32)
    read_only.setflags(write=False)
    with pytest.raises(GraphInputError, match=r"out\[2\] must be a writable"):
        fn(a, b, out=[good[0], good[1], read_only, good[3]])
    with pytest.raises(GraphInputError, match=r"out\[0\] overlaps an input"):
        fn(a, b, out=[a, good[1], good[2], good[3]])


def test_input_errors_unchanged(rng):
    fn = _two_outputs()
    a = rng.standard_normal((37, 11)).astype(np.float32)
    with pytest.raises(GraphInputError, match="expected float32"):
        fn(a, a.astype(np.float64))
    with pytest.raises(GraphInputError, match="takes 2 inputs"):
        fn(a)
    with pytest.raises(GraphInputError, match="takes 2 inputs"):
        fn(a, a, a)                                        # one too many: not bound, not truncated
    big_endian = a.astype(">f4")                           # not bound in place: the checked path
    try:
        got = fn(a, big_endian)
    except (GraphInputError, TypeError):
        return                                             # refused with the copying path's error
    np.testing.assert_allclose(got[0], a.astype(np.float64) + a, rtol=1e-6)


def test_single_element_graph(rng):
    x = hf.symbol((1,), "float32")
    fn = hf.compile(hf.trace(hf.ops.exp(x), inputs=[x]), target="cpu", space=0)
    for value in (-1.5, 0.0, 3.25):
        got = fn(np.array([value], np.float32))
        assert got.shape == (1,) and abs(float(got[0]) - np.exp(value)) <= 1e-6 * np.exp(value)
