"""Attention blocks as PyTorch exports them to ONNX (BERT-base, GPT-2: q and k each
scaled by d**-0.25, keys transposed by Transpose/Reshape, the mask added or a causal
Where, the NaN guard ``Where(IsNaN(p), 0, p)``), and the textbook form (Div by
sqrt(d)), imported through hidet_plugin_onnx: the rule turns each into one attention
operator, one kernel on the CPU with the head split and merge grafted onto it after one
query/key/value matmul, and the result matches
onnxruntime. (The five shared models are measured by ``bench/fusion.py``.)"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import hidet_framework as hf  # noqa: E402

S, E, H = 13, 24, 3  # a prime sequence length; head size 8
DH = E // H
TARGETS = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _model(variant: str, rng) -> onnx.ModelProto:
    w = {name: (rng.standard_normal((E, E)) / np.sqrt(E)).astype(np.float32) for name in ("wq", "wk", "wv")}
    init = dict(w)
    init["heads"] = np.array([1, S, H, DH], np.int64)
    init["merged"] = np.array([1, S, E], np.int64)
    init["quarter"] = np.array(DH ** -0.25, np.float32)
    init["root"] = np.array(np.sqrt(DH), np.float32)
    init["zero"] = np.array(0.0, np.float32)
    init["neg_inf"] = np.array(-np.inf, np.float32)
    n = helper.make_node
    nodes = []
    for t in ("q", "k", "v"):
        nodes += [n("MatMul", ["x", f"w{t}"], [f"{t}_lin"]), n("Reshape", [f"{t}_lin", "heads"], [f"{t}_4d"])]
    nodes += [n("Transpose", ["q_4d"], ["q_t"], perm=[0, 2, 1, 3]), n("Transpose", ["k_4d"], ["kt"], perm=[0, 2, 3, 1]),
              n("Transpose", ["v_4d"], ["v_t"], perm=[0, 2, 1, 3])]
    if variant == "textbook":
        nodes += [n("MatMul", ["q_t", "kt"], ["qk"]), n("Div", ["qk", "root"], ["scores"])]
    else:  # the export: both operands scaled by d**-0.25
        nodes += [n("Mul", ["q_t", "quarter"], ["q_s"]), n("Mul", ["kt", "quarter"], ["kt_s"]),
                  n("MatMul", ["q_s", "kt_s"], ["scores"])]
    if variant == "causal":
        init["causal"] = np.tril(np.ones((S, S), bool))[None, None]
        nodes.append(n("Where", ["causal", "scores", "neg_inf"], ["masked"]))
    else:
        init["bias"] = np.where(rng.random((1, 1, 1, S)) < 0.3, -1e4, 0.0).astype(np.float32)
        nodes.append(n("Add", ["scores", "bias"], ["masked"]))
    nodes += [n("Softmax", ["masked"], ["p"], axis=-1), n("IsNaN", ["p"], ["nan"]),
              n("Where", ["nan", "zero", "p"], ["p0"]), n("MatMul", ["p0", "v_t"], ["ctx"]),
              n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]), n("Reshape", ["ctx_t", "merged"], ["y"])]
    graph = helper.make_graph(nodes, "attention_block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, E])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, E])],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("variant", ["export_add", "causal", "textbook"])
def test_exported_attention_is_one_kernel_and_matches_onnxruntime(variant, target, fx, rng, monkeypatch):
    monkeypatch.setenv("HIDET_FRAMEWORK_QUIET", "1")
    if target == "cpu":
        fx.need_target(target)
    model = _model(variant, rng)
    fn = hf.compile(hf.load(model), target=target)
    x = rng.standard_normal((1, S, E)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    np.testing.assert_allclose(fn(x), want, rtol=1e-4, atol=1e-5)
    rows = [r for r in fn.fusion_report() if "attention" in r.operators]
    assert len(rows) == 1 and rows[0].status == "fused" and rows[0].launches == 1, rows
    assert "softmax" not in " ".join(r.operators for r in fn.fusion_report())
    # the three projections are one matmul (fuse_horizontal_matmul); the head split (the
    # three slices of its product, reshape, transpose, the d**-0.25 scaling) is grafted onto
    # the attention's loads, the head merge (transpose, reshape) onto its stores
    before, after = rows[0].operators.split("[attention]")
    assert before.count("slice") == 3 and "transpose" in before and "transpose" in after
    assert fn.num_launches == 1 + rows[0].launches
