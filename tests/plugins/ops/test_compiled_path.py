"""A few operator graphs through ``hf.compile`` on cpu and (marked ``cuda``) on a GPU.
They skip, saying why, while the driver cannot compile a plain elementwise graph yet;
the other tests of this folder then run on the IR evaluator."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import symbol

@pytest.fixture
def target(op_target, runner):
    """The target of this pass over the folder (conftest.py's `op_target`: cpu, and
    cuda where a GPU is usable)."""
    problem = runner.compiled_path_problem(op_target)
    if problem:
        pytest.skip(problem)
    return op_target


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_elementwise_chain(target, dtype, rand, runner):
    x, y = symbol((37, 129), dtype), symbol((129,), dtype)
    a, b = rand(x.shape, dtype), rand(y.shape, dtype)
    z = ops.gelu(ops.add(ops.mul(x, y), 1.0))
    out, = runner.run_compiled(z, {x: a, y: b}, target)
    ref, = runner.run_with_evaluator(z, {x: a, y: b})
    runner.assert_close(out, ref, dtype)


def test_shape_ops(target, rand, runner):
    x = symbol((3, 5, 7, 2))
    a = rand(x.shape)
    z = ops.pad(ops.transpose(ops.reshape(x, [15, 14]), [1, 0]), [(1, 2), (0, 3)], mode="reflect")
    out, = runner.run_compiled(z, {x: a}, target)
    runner.assert_close(out, np.pad(a.reshape(15, 14).T, [(1, 2), (0, 3)], mode="reflect"), "float32", tol=0)


def test_conv_and_pool(target, rand, runner):
    x, w = symbol((2, 3, 17, 19)), symbol((8, 3, 3, 3))
    a, wa = rand(x.shape, "float32", -1, 1), rand(w.shape, "float32", -1, 1)
    z = ops.max_pool2d(ops.relu(ops.conv2d(x, w, padding=1, stride=2)), 3, 2, 1, ceil_mode=True)
    out, = runner.run_compiled(z, {x: a, w: wa}, target)
    ref, = runner.run_with_evaluator(z, {x: a, w: wa})
    runner.assert_close(out, ref, "float32", tol=1e-5)
