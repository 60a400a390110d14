#!/usr/bin/env python3
"""Writes tiny_resnet.onnx: a small residual image classifier built with onnx.helper
(fixed seed, so the file is reproducible byte for byte), for the README's
``hidet-framework run examples/models/tiny_resnet.onnx --check``.

    python examples/models/make_tiny_resnet.py [OUT.onnx]

Graph (input ``image``: float32[1, 3, 32, 32] -> ``probabilities``: float32[1, 10]):
conv 3x3 (3->16) + batch norm + relu, max pool 2x2, a residual block (two 3x3 convs
with batch norm, relu, the skip added), a strided 3x3 conv (16->32) with bias + clip
(ReLU6), global average pool, flatten, a fully connected layer (32->10), sigmoid.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20240601


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(SEED)
    weights: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple, scale: float = 1.0, positive: bool = False) -> str:
        values = rng.uniform(0.5, 1.5, shape) if positive else rng.normal(0.0, scale, shape)
        weights.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    def conv_bn(x: str, out: str, cin: int, cout: int, stride: int = 1, relu: bool = True) -> str:
        w = weight(f"{out}.w", (cout, cin, 3, 3), np.sqrt(2.0 / (cin * 9)))
        nodes.append(helper.make_node("Conv", [x, w], [f"{out}.conv"], name=f"{out}/Conv", kernel_shape=[3, 3],
                                      pads=[1, 1, 1, 1], strides=[stride, stride]))
        bn = [weight(f"{out}.bn.scale", (cout,), positive=True), weight(f"{out}.bn.bias", (cout,), 0.1),
              weight(f"{out}.bn.mean", (cout,), 0.1), weight(f"{out}.bn.var", (cout,), positive=True)]
        y = f"{out}.bn" if relu else out
        nodes.append(helper.make_node("BatchNormalization", [f"{out}.conv", *bn], [y], name=f"{out}/BatchNorm",
                                      epsilon=1e-5))
        if relu:
            nodes.append(helper.make_node("Relu", [y], [out], name=f"{out}/Relu"))
        return out

    x = conv_bn("image", "stem", 3, 16)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], name="pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2]))
    a = conv_bn("pool", "block.a", 16, 16)
    b = conv_bn(a, "block.b", 16, 16, relu=False)
    nodes.append(helper.make_node("Add", ["pool", b], ["block.sum"], name="block/Add"))
    nodes.append(helper.make_node("Relu", ["block.sum"], ["block"], name="block/Relu"))
    w = weight("down.w", (32, 16, 3, 3), np.sqrt(2.0 / (16 * 9)))
    nodes.append(helper.make_node("Conv", ["block", w, weight("down.b", (32,), 0.1)], ["down.conv"],
                                  name="down/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Clip", ["down.conv", "relu6.min", "relu6.max"], ["down"], name="down/Relu6"))
    weights += [numpy_helper.from_array(np.array(0.0, np.float32), "relu6.min"),
                numpy_helper.from_array(np.array(6.0, np.float32), "relu6.max")]
    nodes.append(helper.make_node("GlobalAveragePool", ["down"], ["gap"], name="head/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["features"], name="head/Flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["features", weight("fc.w", (10, 32), np.sqrt(1.0 / 32)),
                                           weight("fc.b", (10,), 0.1)], ["logits"], name="head/Gemm", transB=1))
    nodes.append(helper.make_node("Sigmoid", ["logits"], ["probabilities"], name="head/Sigmoid"))
    graph = helper.make_graph(
        nodes, "tiny_resnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
        initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="hidet-framework examples/models/make_tiny_resnet.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "tiny_resnet.onnx")
    onnx.save(build(), out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
