"""The operators of hidet_plugin_ops/index_ops.py against numpy: tile, gather_elements,
gather_nd, trilu and resize (nearest and linear), and what they refuse."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import ShapeError, symbol


def test_tile(rand, runner):
    x = symbol((2, 3, 5), "float32")
    a = rand(x.shape)
    out, = runner.run(ops.tile(x, [3, 1, 2]), {x: a})
    runner.assert_close(out, np.tile(a, (3, 1, 2)), "float32", tol=0)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_with_negative_indices(axis, rand, runner, rng):
    x = symbol((3, 7, 5), "float32")
    a = rand(x.shape)
    shape = list(x.shape)
    shape[axis] = 4
    n = x.shape[axis]
    idx = rng.integers(-n, n, size=shape).astype(np.int64)
    i = symbol(idx.shape, "int64")
    out, = runner.run(ops.gather_elements(x, i, axis=axis), {x: a, i: idx})
    runner.assert_close(out, np.take_along_axis(a, np.where(idx < 0, idx + n, idx), axis=axis), "float32", tol=0)


def _gather_nd_reference(data, indices, b):
    batch = indices.shape[:b]
    out = []
    for bi in np.ndindex(*batch) if b else [()]:
        d, ind = data[bi], indices[bi]
        flat = ind.reshape(-1, ind.shape[-1])
        rows = [d[tuple(int(v) for v in r)] for r in flat]
        out.append(np.stack(rows).reshape(ind.shape[:-1] + d.shape[ind.shape[-1]:]))
    return np.stack(out).reshape(batch + out[0].shape) if b else out[0]


@pytest.mark.parametrize("batch_dims,k", [(0, 1), (0, 2), (1, 1), (1, 2)])
def test_gather_nd(batch_dims, k, rand, runner, rng):
    x = symbol((3, 5, 7, 2), "float32")
    a = rand(x.shape)
    extents = x.shape[batch_dims:batch_dims + k]
    idx = np.stack([rng.integers(0, e, size=(3, 4)) for e in extents], axis=-1).astype(np.int64)
    i = symbol(idx.shape, "int64")
    out, = runner.run(ops.gather_nd(x, i, batch_dims=batch_dims), {x: a, i: idx})
    runner.assert_close(out, _gather_nd_reference(a, idx, batch_dims), "float32", tol=0)


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("k", [-2, 0, 3])
def test_trilu(upper, k, rand, runner):
    x = symbol((2, 5, 7), "int32")
    a = rand(x.shape, "int32", -9, 9)
    out, = runner.run(ops.trilu(x, k=k, upper=upper), {x: a})
    runner.assert_close(out, np.triu(a, k) if upper else np.tril(a, k), "int32")


def _linear_1d(a, axis, n_out, coordinate):
    n = a.shape[axis]
    out = []
    for i in range(n_out):
        v = min(max(coordinate(i), 0.0), n - 1)
        low = int(np.floor(v))
        high = min(low + 1, n - 1)
        w = v - low
        out.append(np.take(a, low, axis) * (1 - w) + np.take(a, high, axis) * w)
    return np.stack(out, axis=axis)


def test_resize_linear_half_pixel(rand, runner):
    x = symbol((1, 2, 5, 7), "float32")
    a = rand(x.shape)
    out, = runner.run(ops.resize(x, [1, 2, 9, 4], mode="linear"), {x: a})
    want = a.astype(np.float64)
    for axis, (n_in, n_out) in ((2, (5, 9)), (3, (7, 4))):
        scale = n_out / n_in
        want = _linear_1d(want, axis, n_out, lambda i: (i + 0.5) / scale - 0.5)
    runner.assert_close(out, want, "float32", tol=1e-5)


@pytest.mark.parametrize("nearest_mode", ["floor", "ceil", "round_prefer_floor", "round_prefer_ceil"])
def test_resize_nearest_asymmetric(nearest_mode, rand, runner):
    x = symbol((1, 3, 4, 5), "float32")
    a = rand(x.shape)
    shape = [1, 3, 8, 7]
    out, = runner.run(ops.resize(x, shape, coordinate_transformation_mode="asymmetric",
                                 nearest_mode=nearest_mode), {x: a})
    pick = {"floor": np.floor, "ceil": np.ceil, "round_prefer_floor": lambda v: np.ceil(v - 0.5),
            "round_prefer_ceil": lambda v: np.floor(v + 0.5)}[nearest_mode]
    rows = np.clip(pick(np.arange(8) / (8 / 4)).astype(int), 0, 3)
    cols = np.clip(pick(np.arange(7) / (7 / 5)).astype(int), 0, 4)
    runner.assert_close(out, a[:, :, rows][:, :, :, cols], "float32", tol=0)


def test_refusals():
    x = symbol((2, 3), "float32")
    with pytest.raises(Exception, match="repeats"):
        ops.tile(x, [2])
    with pytest.raises(TypeError, match="int32 or int64"):
        ops.gather_elements(x, symbol((2, 3), "float32"))
    with pytest.raises(ShapeError, match="rank"):
        ops.gather_elements(x, symbol((2,), "int64"))
    with pytest.raises(ShapeError, match="rank >= 2"):
        ops.trilu(symbol((3,), "float32"))
    with pytest.raises(Exception, match="mode 'cubic'"):
        ops.resize(x, [4, 6], mode="cubic")
    with pytest.raises(TypeError, match="float"):
        ops.resize(symbol((2, 3), "int32"), [4, 6], mode="linear")
