"""Shape operators against numpy, and the inverse maps of the bijective ones."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import symbol
from hidet_framework.analysis.evaluator import evaluate_expr

DTYPES = ["float32", "float16"]


def check_inverse_map(y, a, out):
    """Every input element lands where the task's inverse map says."""
    task = y.producer.task
    inverse = task.inverse_map(task.inputs[0])
    assert inverse is not None, f"{y.producer.name} should be bijective"
    for index in itertools.product(*(range(s) for s in a.shape)):
        target = tuple(int(evaluate_expr(e, dict(zip(inverse.axes, index)))) for e in inverse.out_indices)
        assert out[target] == a[index]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, new", [((3, 4, 5), (12, 5)), ((3, 4, 5), (-1, 2, 3)), ((6,), (1, 2, 1, 3)),
                                        ((2, 1, 7), (7, -1)), ((), (1, 1))])
def test_reshape(shape, new, dtype, rand, runner):
    x = symbol(shape, dtype)
    a = rand(shape, dtype)
    y = ops.reshape(x, new)
    out, = runner.run(y, {x: a})
    runner.assert_close(out, a.reshape(new), dtype, tol=0)
    check_inverse_map(y, a, out)


@pytest.mark.parametrize("start, end", [(0, -1), (1, -1), (1, 2), (0, 0), (-2, -1)])
def test_flatten(start, end, rand, runner):
    x = symbol((2, 3, 4, 5))
    a = rand(x.shape)
    y = ops.flatten(x, start, end)
    s, e = start % 4, end % 4
    expected = a.reshape(a.shape[:s] + (-1,) + a.shape[e + 1:])
    out, = runner.run(y, {x: a})
    runner.assert_close(out, expected, "float32", tol=0)
    check_inverse_map(y, a, out)


@pytest.mark.parametrize("axes", [None, 0, (0, -1), [3]])
def test_squeeze(axes, rand, runner):
    x = symbol((1, 3, 5, 1), "float16")
    a = rand(x.shape, "float16")
    y = ops.squeeze(x, axes)
    out, = runner.run(y, {x: a})
    runner.assert_close(out, np.squeeze(a, axes if axes is None or isinstance(axes, int) else tuple(axes)),
                        "float16", tol=0)
    check_inverse_map(y, a, out)


@pytest.mark.parametrize("axes", [0, -1, (0, 2), (1, 4)])
def test_unsqueeze(axes, rand, runner):
    x = symbol((3, 5, 2))
    a = rand(x.shape)
    y = ops.unsqueeze(x, axes)
    out, = runner.run(y, {x: a})
    runner.assert_close(out, np.expand_dims(a, axes), "float32", tol=0)
    check_inverse_map(y, a, out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("perm", [None, (1, 0, 2), (2, 0, 1), (0, -1, 1)])
def test_transpose_and_permute(perm, dtype, rand, runner):
    x = symbol((2, 3, 5), dtype)
    a = rand(x.shape, dtype)
    y = ops.transpose(x, perm)
    out, = runner.run(y, {x: a})
    runner.assert_close(out, np.transpose(a, perm), dtype, tol=0)
    check_inverse_map(y, a, out)
    if perm is not None:
        z = ops.permute(x, perm)
        assert z.shape == y.shape


@pytest.mark.parametrize("shape, target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((4, 1, 2), (4, 3, 2))])
def test_broadcast_to(shape, target, rand, runner):
    x = symbol(shape)
    a = rand(shape)
    out, = runner.run(ops.broadcast_to(x, target), {x: a})
    runner.assert_close(out, np.broadcast_to(a, target), "float32", tol=0)


@pytest.mark.parametrize("shape, target, expected", [((3, 1), (2, 1, 4), (2, 3, 4)), ((2, 3), (-1, 3), (2, 3)),
                                                     ((5,), (2, 1), (2, 5))])
def test_expand_is_bidirectional(shape, target, expected, rand, runner):
    x = symbol(shape)
    a = rand(shape)
    y = ops.expand(x, target)
    assert y.shape == expected
    out, = runner.run(y, {x: a})
    runner.assert_close(out, np.broadcast_to(a, expected), "float32", tol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis, dtype, rand, runner):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(s if d != axis % 3 else s + k for d, s in enumerate(shape)) for k, shape in enumerate(shapes)]
    xs = [symbol(s, dtype) for s in shapes]
    arrays = [rand(s, dtype) for s in shapes]
    out, = runner.run(ops.concat(xs, axis), dict(zip(xs, arrays)))
    runner.assert_close(out, np.concatenate(arrays, axis), dtype, tol=0)


def test_concat_promotes_and_skips_empty(rand, runner):
    x, e, y = symbol((2, 3), "float16"), symbol((0, 3), "float16"), symbol((1, 3), "float32")
    a, b, c = rand(x.shape, "float16"), rand(e.shape, "float16"), rand(y.shape)
    z = ops.concat([x, e, y], axis=0)
    assert z.dtype.name == "float32"
    out, = runner.run(z, {x: a, e: b, y: c})
    runner.assert_close(out, np.concatenate([a, b, c]).astype(np.float32), "float32", tol=0)


@pytest.mark.parametrize("sizes, num, axis", [((1, 4, 2), None, 1), (None, 3, 1), (None, 3, 0), ((0, 5), None, 0)])
def test_split(sizes, num, axis, rand, runner):
    x = symbol((5, 7, 2))
    a = rand(x.shape)
    parts = ops.split(x, sizes, axis=axis, num_outputs=num)
    assert isinstance(parts, tuple)
    outs = runner.run(list(parts), {x: a})
    extent = a.shape[axis]
    if sizes is None:
        step = -(-extent // num)
        sizes = [min(step, max(0, extent - k * step)) for k in range(num)]
    expected = np.split(a, np.cumsum(sizes)[:-1], axis=axis)
    for out, ref in zip(outs, expected):
        runner.assert_close(out, ref, "float32", tol=0)


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1], [4], None, None),
    ([0, 1], [5, -1], [1, 2], [2, 1]),
    ([-1], [-100], [1], [-1]),                 # walk backwards past the front: clamped
    ([10, 3], [-10, 0], [0, 2], [-2, -2]),     # negative steps, out-of-range start
    ([0], [2**62], [-1], [3]),                 # INT_MAX-style end
    ([4], [1], [0], [1]),                      # empty
])
def test_slice_like_onnx(starts, ends, axes, steps, rand, runner):
    x = symbol((5, 6, 7))
    a = rand(x.shape)
    y = ops.slice(x, starts, ends, axes, steps)
    index = [slice(None)] * 3
    for k, s in enumerate(starts):
        axis = (axes[k] if axes is not None else k) % 3
        step = steps[k] if steps is not None else 1
        end = ends[k]
        if step < 0 and end < -a.shape[axis]:
            end = None  # ONNX clamps to "before the first element"; numpy needs None
        index[axis] = slice(s, end, step)
    expected = a[tuple(index)]
    assert y.shape == expected.shape
    out, = runner.run(y, {x: a})
    runner.assert_close(out, expected, "float32", tol=0)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("axis, index_shape", [(0, (4,)), (1, (2, 3)), (-1, ()), (2, (3, 1))])
def test_gather(axis, index_shape, index_dtype, rand, rng, runner):
    x, i = symbol((4, 5, 3), "float16"), symbol(index_shape, index_dtype)
    a = rand(x.shape, "float16")
    n = a.shape[axis]
    idx = rng.integers(-n, n, size=index_shape).astype(index_dtype)
    out, = runner.run(ops.gather(x, i, axis=axis), {x: a, i: idx})
    runner.assert_close(out, np.take(a, idx, axis=axis), "float16", tol=0)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("dtype", DTYPES + ["int32"])
def test_pad(mode, dtype, rand, runner):
    x = symbol((3, 4, 5), dtype)
    a = rand(x.shape, dtype, -5, 5)
    pairs = [(1, 2), (0, 0), (3, 1)]
    kwargs = {"value": 7} if mode == "constant" else {}
    out, = runner.run(ops.pad(x, pairs, mode=mode, **kwargs), {x: a})
    expected = np.pad(a, pairs, mode=mode, **({"constant_values": 7} if mode == "constant" else {}))
    runner.assert_close(out, expected, dtype, tol=0)


def test_pad_onnx_order(rand, runner):
    x = symbol((2, 3))
    a = rand(x.shape)
    out, = runner.run(ops.pad(x, [1, 0, 0, 2], value=-1.5), {x: a})
    runner.assert_close(out, np.pad(a, [(1, 0), (0, 2)], constant_values=-1.5), "float32", tol=0)
