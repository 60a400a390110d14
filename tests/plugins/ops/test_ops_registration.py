"""The plugin registers every operator and the rewrite rule through the hooks;
operators record their attributes; the installed entry point is found."""
from __future__ import annotations

import pytest

import hidet_framework.ops as ops
import hidet_plugin_ops
from hidet_framework.graph import Operator, Tensor, symbol

EXPECTED = {
    "add", "sub", "mul", "div", "pow", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "erf", "tanh", "sigmoid",
    "relu", "gelu", "clip", "where", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_not", "logical_xor", "cast", "maximum", "minimum",
    "reshape", "transpose", "permute", "squeeze", "unsqueeze", "flatten", "expand", "broadcast_to", "concat",
    "split", "slice", "gather", "pad", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "conv2d", "im2col",
    # activations.py and index_ops.py (what ONNX models need beyond the above)
    "floor", "ceil", "round", "sin", "cos", "sign", "reciprocal", "isnan", "isinf", "elu", "leaky_relu",
    "hard_sigmoid", "hard_swish", "softplus", "prelu", "mod", "tile", "gather_elements", "gather_nd", "trilu",
    "resize",
    # attention.py (what the fuse_attention rule makes of the attention pattern)
    "attention",
}


def test_every_operator_is_registered(ops_host):
    assert set(ops_host.operators.names_from("ops")) == EXPECTED
    for name in EXPECTED:
        assert getattr(ops, name) is hidet_plugin_ops.operators()[name]


def test_operators_are_plain_operators_with_tasks():
    y = ops.gelu(symbol((2, 3)), approximate="tanh")
    assert isinstance(y, Tensor) and isinstance(y.producer, Operator)
    assert y.producer.name == "gelu" and y.producer.attributes == {"approximate": "tanh"}
    assert y.producer.task.is_injective()
    # Same math and shapes, same fingerprint (the tuning cache key).
    assert y.producer.task.fingerprint() == ops.gelu(symbol((2, 3)), approximate="tanh").producer.task.fingerprint()
    assert y.producer.task.fingerprint() != ops.gelu(symbol((2, 3))).producer.task.fingerprint()


def test_elementwise_tasks_are_bijective_for_fusion():
    x = symbol((3, 4))
    task = ops.exp(x).producer.task
    assert task.inverse_map(task.inputs[0]) is not None


def test_installed_entry_point(monkeypatch):
    """The one test that relies on what is installed: the distribution's entry point
    loads this package as plugin "ops"."""
    from hidet_framework.extension import PluginHost

    monkeypatch.delenv("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", raising=False)
    monkeypatch.delenv("HIDET_FRAMEWORK_PLUGINS", raising=False)
    monkeypatch.delenv("HIDET_FRAMEWORK_BLOCK_PLUGINS", raising=False)
    host = PluginHost()
    info = {p.name: p for p in host.report()}
    if "ops" not in info:
        pytest.skip("hidet-plugin-ops is not installed (pip install -e plugins/hidet_plugin_ops)")
    assert info["ops"].error is None, info["ops"].error
    assert info["ops"].distribution == "hidet-plugin-ops"
    assert "relu" in host.operators and host.operators.provider("relu") == "ops"
    assert host.passes.provider("conv2d_to_matmul") == "ops"
