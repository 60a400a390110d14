"""Bad models give one clear OnnxImportError each (never a crash or a wrong answer):
missing, empty, truncated and non-ONNX files, missing or short external data, a
cycle, a dangling input, an unknown dtype, symbolic dimensions without input_shapes,
wrong input_shapes entries, and every unsupported operator listed at once."""
from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import hidet_framework as hf
from hidet_plugin_onnx.errors import OnnxImportError, UnsupportedOperatorsError

FLOAT = TensorProto.FLOAT


def _relu_model(build, shape=(2, 3)):
    return build([helper.make_node("Relu", ["x"], ["y"], name="r")], [("x", FLOAT, list(shape))],
                 [("y", FLOAT, list(shape))])


def test_missing_empty_truncated_and_foreign_files(tmp_path, build):
    with pytest.raises(OnnxImportError, match="no such file"):
        hf.load(str(tmp_path / "absent.onnx"))
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(OnnxImportError, match="empty"):
        hf.load(str(empty))
    data = _relu_model(build).SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxImportError, match="truncated|not an ONNX model"):
        hf.load(str(truncated))
    foreign = tmp_path / "foreign.onnx"
    foreign.write_bytes(b"PK\x03\x04 this is a zip file, not a model" * 10)
    with pytest.raises(OnnxImportError, match="not an ONNX model"):
        hf.load(str(foreign))
    text = tmp_path / "notes.onnx"
    text.write_text("hello")
    with pytest.raises(OnnxImportError, match="not an ONNX model"):
        hf.load(str(text))


def test_unknown_suffix_names_the_installed_frontends(tmp_path):
    path = tmp_path / "model.pb"
    path.write_bytes(b"x")
    with pytest.raises(LookupError, match="onnx"):
        hf.load(str(path))


def _external_model(build, tmp_path):
    import onnx

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = build([helper.make_node("Add", ["x", "w"], ["y"])], [("x", FLOAT, [2, 3])], [("y", FLOAT, [2, 3])],
                  {"w": w})
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin",
              size_threshold=0)
    return path, w


def test_external_data_is_read(tmp_path, build):
    path, w = _external_model(build, tmp_path)
    fn = hf.compile(hf.load(str(path)), target="cpu")
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(fn(x), x + w)


def test_missing_or_short_external_data(tmp_path, build):
    path, _ = _external_model(build, tmp_path)
    data = (tmp_path / "ext.bin").read_bytes()
    (tmp_path / "ext.bin").write_bytes(data[:5])
    with pytest.raises(OnnxImportError, match="only 5 bytes"):
        hf.load(str(path))
    os.remove(tmp_path / "ext.bin")
    with pytest.raises(OnnxImportError, match="ext.bin, which does not exist"):
        hf.load(str(path))


def test_cycle_and_dangling_input(build):
    cycle = build([helper.make_node("Relu", ["b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"],
                                                                                         name="second")],
                  [("x", FLOAT, [2])], [("a", FLOAT, [2])])
    with pytest.raises(OnnxImportError, match="cycle"):
        hf.load(cycle)
    dangling = build([helper.make_node("Add", ["x", "nowhere"], ["y"], name="adder")], [("x", FLOAT, [2])],
                     [("y", FLOAT, [2])])
    with pytest.raises(OnnxImportError, match=r"'adder'.*'nowhere'.*dangling"):
        hf.load(dangling)


def test_unknown_dtype(build):
    model = build([helper.make_node("Identity", ["s"], ["y"])], [("s", TensorProto.STRING, [2])],
                  [("y", TensorProto.STRING, [2])])
    with pytest.raises(OnnxImportError, match="'s' has element type STRING"):
        hf.load(model)
    model = build([helper.make_node("Identity", ["x"], ["y"])], [("x", 99, [2])], [("y", FLOAT, [2])])
    with pytest.raises(OnnxImportError, match="unknown element type 99"):
        hf.load(model)


def test_symbolic_dimensions_need_input_shapes(build):
    model = _relu_model(build, ("batch", 3))
    with pytest.raises(OnnxImportError, match=r"'x' has the symbolic dimension 0 \('batch'\).*input_shapes=\{'x': \(N, 3\)\} "
                       r"\(command line: --input-shape x=Nx3\)"):
        hf.load(model)
    graph = hf.load(model, input_shapes={"x": (5, 3)})
    assert graph.inputs[0].shape == (5, 3)


@pytest.mark.parametrize("shapes,message", [
    ({"y": (2, 3)}, "not a graph input"),
    ({"x": (2, 3, 1)}, "rank 3, the model declares rank 2"),
    ({"x": (2, 4)}, "dimension 1 is 4, the model fixes it to 3"),
    ({"x": ("a", 3)}, "is not a shape"),
    ({"x": (-1, 3)}, "is not a shape"),
])
def test_wrong_input_shapes(build, shapes, message):
    with pytest.raises(OnnxImportError, match=message):
        hf.load(_relu_model(build, ("n", 3)), input_shapes=shapes)


def test_unsupported_operators_are_all_listed_at_once(build, isolated_plugin_host):
    import hidet_plugin_cpu
    import hidet_plugin_onnx
    import hidet_plugin_ops

    nodes = [helper.make_node("FancyOp", ["x"], ["a"], name=f"fancy{k}") for k in range(1)]
    nodes += [helper.make_node("Softmax", ["a"], ["b"], name="sm"), helper.make_node("FancyOp", ["b"], ["c"], name="f2"),
              helper.make_node("Relu", ["c"], ["d"]), helper.make_node("MatMul", ["d", "d"], ["e"], name="mm"),
              helper.make_node("Thing", ["e"], ["y"], domain="com.example", name="custom")]
    model = build(nodes, [("x", FLOAT, [3, 3])], [("y", FLOAT, [3, 3])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with isolated_plugin_host.temporary_plugin(hidet_plugin_onnx, "onnx"), \
            isolated_plugin_host.temporary_plugin(hidet_plugin_ops, "ops"), \
            isolated_plugin_host.temporary_plugin(hidet_plugin_cpu, "cpu"):
        with pytest.raises(UnsupportedOperatorsError) as info:
            hf.load(model)
    text = str(info.value)
    assert "FancyOp x2 (nodes 'fancy0', 'f2'): no converter" in text
    assert "Softmax x1 (nodes 'sm'): needs operator 'softmax', provided by hidet-plugin-reduce" in text
    assert "MatMul x1 (nodes 'mm'): needs operator 'matmul', provided by hidet-plugin-matmul" in text
    assert "com.example.Thing x1" in text and "domain 'com.example'" in text
    assert "Relu" not in text
    assert len(info.value.problems) == 4


def test_an_older_opset_is_read_node_by_node(build):
    model = _relu_model(build)
    model.opset_import[0].version = 9  # Relu changed at opset 13
    with pytest.raises(UnsupportedOperatorsError, match="Relu at opset 9 is its form of opset 6, older"):
        hf.load(model)
    model = build([helper.make_node("Not", ["x"], ["y"])], [("x", TensorProto.BOOL, [3])],
                  [("y", TensorProto.BOOL, [3])], opset=1)  # Not has not changed since opset 1
    assert [op.name for op in hf.load(model).nodes] == ["logical_not"]
    model.opset_import[0].version = 99
    with pytest.raises(OnnxImportError, match="opset 99 is not supported"):
        hf.load(model)


def test_a_value_that_must_be_known_at_import(build):
    model = build([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                  [("x", FLOAT, [2, 3]), ("shape", TensorProto.INT64, [2])], [("y", FLOAT, [3, 2])])
    with pytest.raises(OnnxImportError, match="'reshape'.*shape input must be known"):
        hf.load(model)
