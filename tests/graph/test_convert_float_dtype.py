"""hf.compile(graph, dtype="float16"|"bfloat16"): the convert_float_dtype graph pass.

Every check compares with a float64 numpy reference on fresh random inputs; error =
max |ours - ref| / max |ref| (the metric of bench/models.py)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.graph.passes.convert_float_dtype import (DtypeConversionError, convert_float_dtype,
                                                             float32_to_bfloat16_bits, retype_task)


def _err(ours, ref) -> float:
    ours = np.asarray(ours, dtype=np.float64)
    return float(np.max(np.abs(ours - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _model(rng, n=5, k=37, m=29, vocab=11):
    """ids -> embedding rows; x @ w + b; gelu; layer_norm; softmax; a cast of the ids."""
    emb = rng.standard_normal((vocab, k)).astype(np.float32)
    w = (rng.standard_normal((k, m)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    scale, shift = rng.standard_normal(m).astype(np.float32), rng.standard_normal(m).astype(np.float32)
    ids = hf.symbol((n,), "int64", name="ids")
    x = hf.symbol((n, k), "float32", name="x")
    h = hf.ops.gather(hf.constant(emb), ids, axis=0) + x
    y = hf.ops.gelu(hf.ops.matmul(h, hf.constant(w)) + hf.constant(b))
    y = hf.ops.layer_norm(y, hf.constant(scale), hf.constant(shift))
    p = hf.ops.softmax(y, axis=-1)
    c = hf.ops.cast(ids, "float32")  # a cast to float inside the model: stays in its float type
    graph = hf.trace([p, c, ids], inputs=[ids, x])

    def reference(ids_v, x_v):
        from math import erf

        h64 = emb[ids_v].astype(np.float64) + x_v
        z = h64 @ w + b
        z = 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))
        mu, var = z.mean(-1, keepdims=True), z.var(-1, keepdims=True)
        z = (z - mu) / np.sqrt(var + 1e-5) * scale + shift
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True), ids_v.astype(np.float64)

    return graph, reference, (n, k, vocab)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_types_after_conversion(dtype):
    graph, _, _ = _model(np.random.default_rng())
    half = convert_float_dtype(graph, dtype)
    assert [t.dtype.name for t in half.inputs] == ["int64", dtype]  # integer inputs untouched
    assert [t.dtype.name for t in half.outputs] == [dtype, dtype, "int64"]
    assert all(t.dtype.name != "float32" for op in half.nodes for t in op.outputs)
    assert all(t.dtype.name in (dtype, "int64") for t in half.constants())
    assert [t.dtype.name for t in graph.inputs] == ["int64", "float32"]  # the input graph is untouched
    casts = [op for op in half.nodes if op.name == "cast"]
    assert casts and casts[0].attributes["dtype"] == dtype


@pytest.mark.parametrize("dtype,tolerance", [("float16", 1e-2), ("bfloat16", 5e-2)])
def test_compiled_half_model_matches_float64(dtype, tolerance):
    rng = np.random.default_rng()
    graph, reference, (n, k, vocab) = _model(rng)
    fn = hf.compile(graph, target="cpu", dtype=dtype)
    ids = rng.integers(0, vocab, n).astype(np.int64)
    x = rng.standard_normal((n, k)).astype(np.float32)
    x_half = x.astype(np.float16) if dtype == "float16" else float32_to_bfloat16_bits(x)
    x_seen = x_half.astype(np.float64) if dtype == "float16" else _bf16_values(x_half).astype(np.float64)
    p, c, ids_out = fn(ids, x_half)
    to64 = (lambda a: a.astype(np.float64)) if dtype == "float16" else (lambda a: _bf16_values(a).astype(np.float64))
    ref_p, ref_c = reference(ids, x_seen)
    assert _err(to64(p), ref_p) < tolerance
    assert np.array_equal(to64(c), ref_c)
    assert np.array_equal(ids_out, ids)
    with pytest.raises(ValueError):  # float32 inputs are refused, never converted silently
        fn(ids, x)


def test_softmax_statistics_stay_float32():
    """A float16 sum over 4096 elements near 1 would lose ~2 digits; float32 keeps them."""
    rng = np.random.default_rng()
    x = hf.symbol((3, 4096), "float32", name="x")
    fn = hf.compile(hf.trace(hf.ops.softmax(x, axis=-1), inputs=[x]), target="cpu", dtype="float16")
    xv = (rng.standard_normal((3, 4096)) * 0.01).astype(np.float16)
    e = np.exp(xv.astype(np.float64) - xv.max(-1, keepdims=True))
    assert _err(fn(xv), e / e.sum(-1, keepdims=True)) < 2e-3


def test_saturating_constants_and_bfloat16_rounding():
    x = hf.symbol((4,), "float32", name="x")
    mask = hf.constant(np.array([0, -3.4e38, 1, np.inf], dtype=np.float32))
    half = convert_float_dtype(hf.trace(hf.ops.add(x, mask), inputs=[x]), "float16")
    stored = half.constants()[0].storage
    assert stored.dtype == np.float16 and stored[1] == -65504 and np.isinf(stored[3])
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5e-3, np.inf, -np.inf, np.nan, 3.0e38], dtype=np.float32)
    bits = float32_to_bfloat16_bits(values)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    expected = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    same = (bits == expected) | (np.isnan(values))
    assert same.all() and np.isnan(_bf16_values(bits[6]))
    random = np.random.default_rng().standard_normal(10000).astype(np.float32) * 1e3
    assert np.array_equal(float32_to_bfloat16_bits(random), random.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_refusals_and_identity():
    graph, _, _ = _model(np.random.default_rng())
    assert convert_float_dtype(graph, None) is graph and convert_float_dtype(graph, "float32") is graph
    for bad in ("int8", "float64", "half"):
        with pytest.raises(DtypeConversionError, match="expected float32, float16 or bfloat16"):
            convert_float_dtype(graph, bad)
    with pytest.raises(ValueError):
        hf.compile(graph, target="cpu", dtype="int8")


def test_integer_only_operators_are_shared():
    ids = hf.symbol((6,), "int64", name="ids")
    x = hf.symbol((6,), "float32", name="x")
    doubled = hf.ops.add(ids, ids)
    graph = hf.trace([doubled, hf.ops.mul(x, x)], inputs=[ids, x])
    half = convert_float_dtype(graph, "float16")
    assert half.outputs[0] is doubled and half.outputs[1].dtype.name == "float16"


def test_retype_task_keeps_float32_inside():
    x = hf.symbol((2, 8), "float32", name="x")
    op = hf.ops.reduce_sum(x, axes=[1]).producer
    task = retype_task(op.task, [True], "float16")
    assert task.inputs[0].dtype.name == "float16" and task.outputs[0].dtype.name == "float16"
    assert "float32" in repr(task.outputs[0].definition.value) or "f32" in repr(task.outputs[0].definition.value)


def test_scalar_constant_keeps_its_shape():
    """A 0-d float32 constant (BERT's and GPT-2's ONNX scale factors) stays 0-d in
    bfloat16: float32_to_bfloat16_bits once made it [1], and mul refused it."""
    assert float32_to_bfloat16_bits(np.asarray(np.float32(2.0))).shape == ()
    x = hf.symbol((3,), "float32", name="x")
    y = hf.ops.mul(x, hf.constant(np.asarray(np.float32(0.125))))
    half = convert_float_dtype(hf.trace(y, inputs=[x]), "bfloat16")
    assert [tuple(c.shape) for c in half.constants()] == [()]

