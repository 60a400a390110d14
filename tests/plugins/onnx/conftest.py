"""Fixtures of the ONNX frontend tests: small models built with onnx.helper, and
running a model both here and in a reference (onnxruntime, else onnx.reference)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


@pytest.fixture(autouse=True)
def quiet_and_isolated_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HIDET_FRAMEWORK_QUIET", "1")


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name="g"):
    """A ModelProto: inputs/outputs as (name, elem_type, shape) triples."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def reference_outputs(model, feed):
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, feed)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


@pytest.fixture
def build():
    return make_model


@pytest.fixture
def reference():
    return reference_outputs


FLOAT, INT64, BOOL, STRING = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL, TensorProto.STRING
