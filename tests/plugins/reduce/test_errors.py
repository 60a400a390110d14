"""What the reduce plugin refuses, at trace time, with a message naming the operator,
the argument and the shapes."""
from __future__ import annotations

import pytest

import hidet_framework as hf
from hidet_framework.graph import ShapeError


def _x(shape=(4, 6, 8), dtype="float32"):
    return hf.symbol(shape, dtype)


@pytest.mark.parametrize("call, words", [
    (lambda: hf.ops.reduce_sum(_x(), 3), ["reduce_sum", "axes entry=3", "f32[4, 6, 8]", "-3..2"]),
    (lambda: hf.ops.reduce_max(_x(), (-4,)), ["reduce_max", "axes entry=-4", "f32[4, 6, 8]"]),
    (lambda: hf.ops.reduce_mean(_x(), [1, -2]), ["reduce_mean", "axes=[1, -2]", "twice", "f32[4, 6, 8]"]),
    (lambda: hf.ops.softmax(_x(), 3), ["softmax", "axis=3", "f32[4, 6, 8]", "rank 3"]),
    (lambda: hf.ops.log_softmax(_x(), -4), ["log_softmax", "axis=-4"]),
    (lambda: hf.ops.argmax(_x(), 5), ["argmax", "axis=5", "f32[4, 6, 8]"]),
    (lambda: hf.ops.cumsum(_x(), -9), ["cumsum", "axis=-9"]),
    (lambda: hf.ops.layer_norm(_x(), _x((8,)), epsilon=0.0), ["layer_norm", "epsilon", "0.0", "f32[4, 6, 8]"]),
    (lambda: hf.ops.rms_norm(_x(), _x((8,)), epsilon=-1e-5), ["rms_norm", "epsilon", "positive"]),
    (lambda: hf.ops.batch_norm(_x(), *[_x((6,))] * 4, epsilon=float("nan")), ["batch_norm", "epsilon"]),
    (lambda: hf.ops.layer_norm(_x(), _x((7,))), ["layer_norm", "scale", "f32[7]", "[8]", "f32[4, 6, 8]"]),
    (lambda: hf.ops.layer_norm(_x(), _x((8,)), _x((6, 8))), ["layer_norm", "bias", "f32[6, 8]", "[8]"]),
    (lambda: hf.ops.layer_norm(_x(), _x((5, 8)), axis=1), ["layer_norm", "scale", "f32[5, 8]", "[6, 8]"]),
    (lambda: hf.ops.layer_norm(_x(), _x((8,)), axis=3), ["layer_norm", "axis=3"]),
    (lambda: hf.ops.instance_norm(_x(), _x((5,)), _x((6,))), ["instance_norm", "scale", "f32[5]", "[6]"]),
    (lambda: hf.ops.batch_norm(_x(), _x((6,)), _x((6,)), _x((6,)), _x((4,))), ["batch_norm", "var", "f32[4]", "[6]"]),
    (lambda: hf.ops.group_norm(_x((2, 6, 5)), _x((6,)), _x((6,)), 4), ["group_norm", "num_groups=4", "6 channels"]),
    (lambda: hf.ops.group_norm(_x((2, 6, 5)), _x((6,)), _x((6,)), 0), ["group_norm", "num_groups=0"]),
    (lambda: hf.ops.instance_norm(_x((4, 6)), _x((6,)), _x((6,))), ["instance_norm", "rank 3", "f32[4, 6]"]),
    (lambda: hf.ops.softmax(_x(dtype="int32")), ["softmax", "float", "i32[4, 6, 8]"]),
    (lambda: hf.ops.reduce_mean(_x(dtype="int32")), ["reduce_mean", "float", "i32[4, 6, 8]"]),
    (lambda: hf.ops.reduce_sum(_x(dtype="bool")), ["reduce_sum", "non-bool"]),
    (lambda: hf.ops.argmax(_x(dtype="bool"), 0), ["argmax", "non-bool"]),
    (lambda: hf.ops.argmin(_x((0, 3)), 0), ["argmin", "empty"]),
])
def test_bad_arguments_are_refused_naming_operator_argument_and_shapes(call, words):
    with pytest.raises(ShapeError) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_wrong_argument_types_are_type_errors():
    with pytest.raises(TypeError, match="softmax: axis must be an int"):
        hf.ops.softmax(_x(), 1.0)
    with pytest.raises(TypeError, match="reduce_sum: x must be a Tensor"):
        hf.ops.reduce_sum([1.0, 2.0])
    with pytest.raises(TypeError, match="layer_norm: epsilon must be a number"):
        hf.ops.layer_norm(_x(), _x((8,)), epsilon="1e-5")
    with pytest.raises(TypeError, match="layer_norm: scale must be a Tensor"):
        hf.ops.layer_norm(_x(), 1.0)


def test_the_plugin_registers_every_operator_and_its_templates():
    from hidet_framework.extension import plugin_host

    host = plugin_host()
    names = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l2", "reduce_sum_square",
             "argmax", "argmin", "softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm", "instance_norm",
             "group_norm", "cumsum"]
    for name in names:
        assert host.operators.provider(name) == "reduce", name
    for name in ("softmax", "layer_norm", "reduce_sum", "argmax", "cumsum"):
        assert [t.name for t in host.templates.templates_for(name, "cpu")] == [f"reduce.cpu.{name}"]
    assert {t.name for t in host.templates.templates_for("reduce_sum", "cuda")} == {
        "reduce.cuda_rows.reduce_sum", "reduce.cuda_columns.reduce_sum"}
