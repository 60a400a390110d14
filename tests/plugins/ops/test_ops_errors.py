"""Errors at trace time: mismatched shapes name the operator and both shapes; bad
attributes say what and why."""
from __future__ import annotations

import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import ShapeError, symbol
from hidet_plugin_ops.common import OperatorAttributeError


def test_broadcast_error_names_op_and_shapes():
    with pytest.raises(ShapeError, match=r"^add: cannot broadcast f32\[3, 4\] with f32\[5\]$"):
        ops.add(symbol((3, 4)), symbol((5,)))
    with pytest.raises(ShapeError, match=r"less: cannot broadcast f16\[2, 3\] with f16\[2\]"):
        ops.less(symbol((2, 3), "float16"), symbol((2,), "float16"))
    with pytest.raises(ShapeError, match=r"where: cannot broadcast"):
        ops.where(symbol((3,), "bool"), symbol((4,)), 0.0)


def test_python_operator_goes_through_the_registry():
    with pytest.raises(ShapeError, match=r"^sub: cannot broadcast"):
        symbol((2, 2)) - symbol((3,))


@pytest.mark.parametrize("call, error, message", [
    (lambda x: ops.reshape(x, [5, -1]), ShapeError, r"reshape: cannot reshape f32\[3, 4\] \(12 elements\)"),
    (lambda x: ops.reshape(x, [-1, -1]), OperatorAttributeError, "one -1"),
    (lambda x: ops.transpose(x, [0, 0]), OperatorAttributeError, r"perm \[0, 0\] is not a permutation"),
    (lambda x: ops.transpose(x, [1, 0, 2]), OperatorAttributeError, "not a permutation of the 2 dimensions"),
    (lambda x: ops.squeeze(x, 0), OperatorAttributeError, "axis 0 of f32\\[3, 4\\] has extent 3, not 1"),
    (lambda x: ops.unsqueeze(x, 5), OperatorAttributeError, "axes 5 is out of range for a tensor of rank 3"),
    (lambda x: ops.concat([x, symbol((3, 5))], 0), ShapeError, "concat: cannot join"),
    (lambda x: ops.split(x, [1, 1], axis=1), OperatorAttributeError, "add up to the extent 4"),
    (lambda x: ops.slice(x, [0], [2], [2]), OperatorAttributeError, "out of range for a tensor of rank 2"),
    (lambda x: ops.slice(x, [0], [2], [0], [0]), OperatorAttributeError, "steps .* must be non-zero"),
    (lambda x: ops.pad(x, [(1, -1), (0, 0)]), OperatorAttributeError, "negative padding"),
    (lambda x: ops.pad(x, [(4, 0), (0, 0)], mode="reflect"), OperatorAttributeError, "smaller than the extent 3"),
    (lambda x: ops.pad(x, [(1, 0)]), OperatorAttributeError, r"one \(before, after\) pair per dimension"),
    (lambda x: ops.pad(x, [1, 0]), OperatorAttributeError, "2 \\(before, after\\) pairs or 4 ints"),
    (lambda x: ops.gather(x, symbol((2,), "float32")), TypeError, "int32 or int64"),
    (lambda x: ops.gather(x, symbol((2,), "int32"), axis=2), OperatorAttributeError, "axis 2 is out of range"),
    (lambda x: ops.flatten(x, 1, 0), OperatorAttributeError, "start_dim 1 comes after end_dim 0"),
    (lambda x: ops.gelu(x, approximate="fast"), OperatorAttributeError, "'none' or 'tanh'"),
    (lambda x: ops.div(x, 2, rounding_mode="round"), OperatorAttributeError, "rounding_mode"),
    (lambda x: ops.expand(x, [2, 3]), ShapeError, r"expand: cannot broadcast f32\[3, 4\] to \[2, 3\]"),
    (lambda x: ops.add(x, "1"), TypeError, "Python bool/int/float"),
    (lambda x: ops.max_pool2d(x, 2), ShapeError, "NCHW tensor of rank 4"),
])
def test_attribute_and_shape_errors(call, error, message):
    x = symbol((3, 4))
    with pytest.raises(error, match=message):
        call(x)


def test_pool_and_conv_errors():
    x = symbol((1, 4, 5, 5))
    with pytest.raises(OperatorAttributeError, match="stride .* must be positive"):
        ops.max_pool2d(x, 2, stride=0)
    with pytest.raises(ShapeError, match="window .* is larger than the padded input"):
        ops.avg_pool2d(x, 7)
    with pytest.raises(OperatorAttributeError, match="groups=3 must divide the input channels \\(4\\)"):
        ops.conv2d(x, symbol((3, 1, 3, 3)), groups=3)
    with pytest.raises(ShapeError, match="expects 6 input channels"):
        ops.conv2d(x, symbol((4, 3, 3, 3)), groups=2)
    with pytest.raises(ShapeError, match=r"bias must be f32\[4\]"):
        ops.conv2d(x, symbol((4, 4, 3, 3)), symbol((3,)))
    with pytest.raises(TypeError, match="differ in dtype"):
        ops.conv2d(x, symbol((4, 4, 3, 3), "float16"))
    with pytest.raises(OperatorAttributeError, match="padding .* non-negative"):
        ops.conv2d(x, symbol((4, 4, 3, 3)), padding=-1)


def test_scalars_only_is_an_error():
    with pytest.raises(TypeError, match="add: needs at least one Tensor operand"):
        ops.add(1, 2.0)
