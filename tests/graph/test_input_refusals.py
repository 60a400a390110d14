"""Issue 12 item 9: inputs and shapes that used to pass with a wrong meaning or an
unclear error are refused with a GraphInputError / ShapeError that says why."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.runtime.compiled_graph import GraphInputError
from hidet_framework.graph.tensor import ShapeError


@pytest.mark.parametrize("target", ["evaluator", "cpu"])
def test_big_endian_input_is_a_graph_input_error(dummy, rng, target):
    x = hf.symbol((3, 5), "float32", name="x")
    fn = hf.compile(hf.trace(dummy.scale(x, 3.0), inputs=[x]), target=target)
    native = rng.standard_normal((3, 5)).astype(np.float32)
    swapped = native.astype(native.dtype.newbyteorder(">" if native.dtype.byteorder != ">" else "<"))
    np.testing.assert_array_equal(swapped, native)  # same values, other byte order
    with pytest.raises(GraphInputError, match="input 0 \\('x'\\).*non-native byte order.*newbyteorder"):
        fn(swapped)
    np.testing.assert_allclose(fn(native), native.astype(np.float64) * 3.0, rtol=1e-6)


@pytest.mark.parametrize("shape", [(2.7, 3), (2.0, 3), (True, 3), ("2", 3), (None,)])
def test_non_integer_extents_are_refused(shape):
    with pytest.raises(ShapeError, match="is not an integer"):
        hf.symbol(shape, "float32")


def test_numpy_integer_extents_are_accepted():
    assert hf.symbol((np.int64(2), np.int32(3))).shape == (2, 3)
