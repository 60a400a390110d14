"""Whole models through the frontend: the shipped example against the reference,
shape subgraphs folded at import, newer opsets node by node, and saving a compiled
model (hashes and target checked on load, nothing compiled)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import hidet_framework as hf
from hidet_framework.runtime.saved_graph import SavedModelError

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "models", "tiny_resnet.onnx")


@pytest.fixture(scope="module")
def example_path():
    if not os.path.isfile(EXAMPLE):
        pytest.skip("examples/models/tiny_resnet.onnx is not in this checkout")
    return EXAMPLE


def test_example_matches_the_reference(example_path, reference, rng):
    import onnx

    fn = hf.compile(hf.load(example_path), target="cpu")
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = reference(onnx.load(example_path), {"image": x})[0]
    got = fn(x)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-5


def test_example_is_what_its_script_writes(example_path, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_tiny_resnet", os.path.join(os.path.dirname(example_path),
                                                                                 "make_tiny_resnet.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with open(example_path, "rb") as f:
        assert module.build().SerializeToString() == f.read()


def test_shape_subgraphs_fold_at_import(build, reference, rng):
    # y = reshape(x, concat(shape(x)[0:1], [-1])) * 2 + gather(shape(x), 1)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("ConstantOfShape", ["target_len"], ["twos"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
        helper.make_node("Mul", ["flat", "twos"], ["m"]),
        helper.make_node("Add", ["m", "cf"], ["y"]),
    ]
    inits = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "zero1": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64), "target_len": np.array([1], np.int64)}
    model = build(nodes, [("x", TensorProto.FLOAT, [3, 4, 5])], [("y", TensorProto.FLOAT, [3, 20])], inits)
    graph = hf.load(model)
    assert sorted(op.name for op in graph.nodes) == ["add", "mul", "reshape"]
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(hf.compile(graph, target="cpu")(x), reference(model, {"x": x})[0], rtol=1e-6)


def test_a_newer_opset_is_accepted_node_by_node(build):
    import onnx.defs

    newest = onnx.defs.onnx_opset_version()
    if newest <= 21:
        pytest.skip("this onnx knows no opset above 21")
    model = build([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [4])],
                  [("y", TensorProto.FLOAT, [4])], opset=newest)
    assert [op.name for op in hf.load(model).nodes] == ["relu"]


def test_save_and_load_compiled(example_path, tmp_path, rng, monkeypatch):
    fn = hf.compile(hf.load(example_path), target="cpu")
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    folder = str(tmp_path / "saved")
    fn.save(folder)
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    assert manifest["target"] == "cpu" and "plan.json" in manifest["files"] and "weights.bin" in manifest["files"]
    # loading never compiles: the backend's codegen and build are not reachable
    from hidet_framework.extension import plugin_host

    backend = plugin_host().backend_for("cpu")
    monkeypatch.setattr(type(backend), "build", lambda *a, **k: pytest.fail("load_compiled compiled"))
    monkeypatch.setattr(type(backend), "codegen", lambda *a, **k: pytest.fail("load_compiled generated code"))
    loaded = hf.load_compiled(folder)
    np.testing.assert_array_equal(loaded(x), fn(x))
    assert loaded.num_launches == fn.num_launches
    with pytest.raises(Exception, match="expected float32"):
        loaded(x.astype(np.float64))
    with pytest.raises(SavedModelError, match="not an empty folder"):
        fn.save(folder)


def test_load_compiled_refuses_damage_and_foreign_targets(example_path, tmp_path):
    fn = hf.compile(hf.load(example_path), target="cpu")
    folder = str(tmp_path / "saved")
    fn.save(folder)
    library = os.path.join(folder, "libs", sorted(os.listdir(os.path.join(folder, "libs")))[0])
    original = open(library, "rb").read()
    with open(library, "r+b") as f:
        f.seek(len(original) // 2)
        f.write(b"\x90\x90\x90\x90")
    with pytest.raises(SavedModelError, match="does not match its hash"):
        hf.load_compiled(folder)
    open(library, "wb").write(original)
    hf.load_compiled(folder)
    path = os.path.join(folder, "manifest.json")
    manifest = json.load(open(path))
    manifest["target_fingerprint"] = "0" * 16
    json.dump(manifest, open(path, "w"))
    with pytest.raises(SavedModelError, match="compiled for another cpu target"):
        hf.load_compiled(folder)
    os.remove(path)
    with pytest.raises(SavedModelError, match="no manifest.json"):
        hf.load_compiled(folder)
