"""The conv2d folding rules of hidet_plugin_ops (rules_fold_conv2d.py, registered
through register_passes at the graph_rewrite point, phase 0): batch_norm, and the
per-channel multiply / add the ONNX frontend makes of BatchNormalization, fold into the
constant-weight convolution before them. Checked against float64 numpy on odd sizes,
with the rule's effect seen in the compiled graph; and what must not fold (a
non-constant coefficient, one that is not per channel, a convolution read twice
keeps its other reader's value)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf


def _conv_np(x, w, b, stride, padding):
    xp = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
    o, _, kh, kw = w.shape
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", win, w[:, :, i, j])
    return out + b.reshape(1, -1, 1, 1)


def _params(rng, channels_in=3, channels_out=5):
    w = rng.standard_normal((channels_out, channels_in, 3, 3)).astype(np.float32)
    b = rng.standard_normal(channels_out).astype(np.float32)
    gamma, beta, mean = (rng.standard_normal(channels_out).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, channels_out).astype(np.float32)
    return w, b, gamma, beta, mean, var


def _ops_named(fn) -> list[str]:
    return [r.operators for r in fn.fusion_report()]


@pytest.mark.parametrize("target", ["evaluator", "cpu"])
@pytest.mark.parametrize("form", ["batch_norm", "mul_add"])
def test_a_batch_norm_after_a_convolution_folds_into_it(target, form, fx, rng):
    fx.need_ops("conv2d", "batch_norm", "mul", "add")
    w, b, gamma, beta, mean, var = _params(rng)
    x = hf.symbol((2, 3, 7, 5) if target == "cpu" else (1, 3, 5, 3))
    y = hf.ops.conv2d(x, hf.constant(w), hf.constant(b), stride=2, padding=1)
    if form == "batch_norm":
        y = hf.ops.batch_norm(y, *(hf.constant(v) for v in (gamma, beta, mean, var)), epsilon=1e-3)
    else:  # what hidet_plugin_onnx makes of BatchNormalization with known statistics
        a = (gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-3))
        y = hf.ops.add(hf.ops.mul(y, hf.constant(a.reshape(-1, 1, 1).astype(np.float32))),
                       hf.constant((beta - mean * a).reshape(-1, 1, 1).astype(np.float32)))
    out = hf.ops.relu(y)

    def ref(xv):
        conv = _conv_np(xv, w.astype(np.float64), b.astype(np.float64), 2, 1)
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-3)
        return [np.maximum((conv - mean.reshape(1, -1, 1, 1)) * scale.reshape(1, -1, 1, 1)
                           + beta.reshape(1, -1, 1, 1), 0)]

    fused, unfused = fx.check(target, [out], [x], ref, rng, rtol=1e-4, atol=1e-4)
    names = " ".join(_ops_named(unfused)).split()
    # one add left: conv2d_to_matmul's bias (the folded one); none on cpu, where the
    # direct template of conv2d_packed (cpu_conv.py) adds the folded bias itself
    adds = 0 if target == "cpu" else 1
    assert "batch_norm" not in names and "mul" not in names and names.count("add") == adds, names
    assert target != "cpu" or "conv2d_packed" in names, names
    assert fused.pass_stats["rewrite_patterns"]["applied"] >= 2  # the fold(s), then the conv2d lowering


def test_what_is_not_known_or_not_per_channel_does_not_fold(fx, rng):
    fx.need_ops("conv2d", "mul", "add")
    w, b, *_ = _params(rng)
    x, s = hf.symbol((1, 3, 3, 4)), hf.symbol((5, 1, 1))
    per_pixel = rng.standard_normal((1, 5, 3, 4)).astype(np.float32)
    conv = hf.ops.conv2d(x, hf.constant(w), hf.constant(b), padding=1)
    scaled = hf.ops.mul(conv, s)                                  # not a constant
    shifted = hf.ops.add(scaled, hf.constant(per_pixel))          # not per channel
    fn = hf.compile(hf.trace([shifted], inputs=[x, s]), target="evaluator", fusion=False)
    names = " ".join(_ops_named(fn)).split()
    assert "mul" in names and "add" in names, names
    fx.check("evaluator", [shifted], [x, s],
             lambda xv, sv: [_conv_np(xv, w, b, 1, 1) * sv + per_pixel], rng)


def test_a_convolution_read_twice_keeps_its_value_for_the_other_reader(fx, rng):
    fx.need_ops("conv2d", "mul")
    w, b, gamma, *_ = _params(rng)
    x = hf.symbol((1, 3, 4, 3))
    conv = hf.ops.conv2d(x, hf.constant(w), hf.constant(b), padding=1)
    scaled = hf.ops.mul(conv, hf.constant(gamma.reshape(-1, 1, 1)))
    fx.check("evaluator", [scaled, conv], [x],
             lambda xv: [_conv_np(xv, w, b, 1, 1) * gamma.reshape(1, -1, 1, 1), _conv_np(xv, w, b, 1, 1)], rng)


def test_the_rules_are_registered_through_the_plugin_before_the_horizontal_and_lowering_rules():
    from hidet_framework.extension import points
    from hidet_framework.graph.passes.rewrite_patterns import registered_rules

    rules = {getattr(r, "name", ""): r for r in registered_rules()}
    for name in ("fold_batch_norm_into_conv2d", "fold_scale_into_conv2d", "fold_shift_into_conv2d"):
        assert rules[name].point == points.GRAPH_REWRITE and rules[name].phase == -1
    assert rules["fuse_horizontal_conv2d"].phase == 0  # a fold must see the conv2d, not a slice of a wider one
    assert getattr(rules["conv2d_to_matmul"], "phase", 1) == 1


def test_an_onnx_conv_batch_normalization_loads_as_one_convolution(rng):
    """Through the ONNX frontend (which makes BatchNormalization with known statistics
    a multiply and an add): the compiled graph has no multiply left, and it agrees with
    onnxruntime."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    w, b, gamma, beta, mean, var = _params(rng, 3, 4)
    inits = [numpy_helper.from_array(v, n) for v, n in
             ((w, "W"), (b, "B"), (gamma, "g"), (beta, "be"), (mean, "m"), (var, "v"))]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["y"], epsilon=1e-3)]
    model = helper.make_model(
        helper.make_graph(nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 4])], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    fn = hf.compile(hf.load(model), target="evaluator", fusion=False)
    names = " ".join(_ops_named(fn)).split()
    assert "mul" not in names and "batch_norm" not in names, names
    xv = rng.standard_normal((1, 3, 5, 4)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xv})
    np.testing.assert_allclose(fn(xv), want, rtol=1e-4, atol=1e-4)
    del onnx
