"""hf.compile(..., dtype="float16"|"bfloat16") (graph/passes/convert_float_dtype.py):
what the conversion keeps and what it changes, beyond the model-level tests of
test_convert_float_dtype.py — names (of constants, outputs, task inputs and
intermediates), integer constants, attributes naming types, float32 intermediates,
given inverse maps, integer tables indexed by float-derived indices, the pass's count,
and the bfloat16 bits of NaNs with payloads. Written against survivors of the graph
group's mutation run (issue 12)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.compute import Task, compute, tensor_input
from hidet_framework.compute.task import InverseMap
from hidet_framework.graph import Operator
from hidet_framework.graph.passes import GraphPassContext
from hidet_framework.graph.passes.convert_float_dtype import (convert_float_dtype, float32_to_bfloat16_bits,
                                                             retype_task)
from hidet_framework.ir import dtypes, var
from hidet_framework.ir.expr import cast


def _bf16_to_float(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_constants_outputs_and_task_nodes_keep_their_names(dummy, dtype):
    x = hf.symbol((5,), "float32", name="x")
    w = hf.constant(np.linspace(-1, 1, 5).astype(np.float32), name="weight")
    g = hf.trace(dummy.scale(dummy.add(x, w), 0.5), inputs=[x])
    half = convert_float_dtype(g, dtype)
    assert [c.name for c in half.constants()] == ["weight"]
    assert [c.dtype.name for c in half.constants()] == [dtype]
    assert [[t.name for t in op.outputs] for op in half.nodes] == [["add_out0"], ["scale_out0"]]
    assert [t.name for t in half.outputs] == ["scale_out0"]
    for old, new in zip(g.nodes, half.nodes):
        assert [t.name for t in new.task.inputs] == [t.name for t in old.task.inputs]
        assert [t.name for t in new.task.tensors()] == [t.name for t in old.task.tensors()]


def test_integer_constants_stay_integers(rng):
    """Token ids, offsets and shapes stored as int64 constants are not converted."""
    ids = hf.symbol((6,), "int64", name="ids")
    x = hf.symbol((6,), "float32", name="x")
    offsets = hf.constant(np.array([3, -1, 7, 0, 2, 5], np.int64), name="offsets")
    g = hf.trace([hf.ops.add(ids, offsets), hf.ops.mul(x, x)], inputs=[ids, x])
    half = convert_float_dtype(g, "float16")
    assert [(c.name, c.dtype.name) for c in half.constants()] == [("offsets", "int64")]
    fn = hf.compile(g, target="cpu", dtype="float16")
    iv = rng.integers(-1000, 1000, 6).astype(np.int64)
    xv = rng.standard_normal(6).astype(np.float16)
    shifted, squared = fn(iv, xv)
    np.testing.assert_array_equal(shifted, iv + offsets.storage)
    # a square below fp16's normal range (|x| < 2**-7) is a subnormal, held to its spacing 2**-24
    np.testing.assert_allclose(squared.astype(np.float64), xv.astype(np.float64) ** 2, rtol=1e-3, atol=2.0**-24)


def _tagged(x, attributes):
    """y = x + 1 with arbitrary attributes on the operator and its task."""
    a = tensor_input("a", x.dtype, x.shape)
    y = compute("y", x.shape, lambda *i: a[i] + 1.0)
    return Operator("tagged", [x], Task("tagged", [a], [y], attributes=dict(attributes)), attributes).outputs[0]


def test_only_attributes_naming_float32_name_the_new_type():
    attributes = {"acc": dtypes.float32, "index_type": dtypes.int32, "out": dtypes.float64,
                  "approximate": "tanh", "dtype": "float32", "note": "float32x", "axis": -1}
    x = hf.symbol((4,), "float32", name="x")
    half = convert_float_dtype(hf.trace(_tagged(x, attributes), inputs=[x]), "bfloat16")
    want = dict(attributes, acc=dtypes.bfloat16, dtype="bfloat16")
    (op,) = half.nodes
    assert op.attributes == want and op.task.attributes == want


def test_intermediates_stay_float32_outputs_are_rounded_once(dummy, rng):
    """A two-stage task (row maxima, then x - max): the maxima stay float32 inside, only
    the output takes the new type."""
    x = hf.symbol((3, 7), "float32", name="x")
    task = dummy.center(x).producer.task
    half = retype_task(task, [True], "float16")
    assert [(t.name, t.dtype.name) for t in half.tensors()] == [("a", "float16"), ("mx", "float32"),
                                                               ("y", "float16")]
    fn = hf.compile(hf.trace(dummy.center(x), inputs=[x]), target="cpu", dtype="float16")
    xv = (rng.standard_normal((3, 7)) * 100).astype(np.float16)
    x64 = xv.astype(np.float64)
    np.testing.assert_allclose(fn(xv).astype(np.float64), x64 - x64.max(1, keepdims=True), rtol=1e-3, atol=0.07)


def test_an_inverse_map_given_for_a_converted_input_follows_it():
    x = tensor_input("x", "float32", [6])
    y = compute("y", [2, 3], lambda i, j: x[i * 3 + j])
    j0 = var("j0")
    given = InverseMap((j0,), (j0 / 3, j0 % 3))
    half = retype_task(Task("reshape", [x], [y], inverse_maps={x: given}), [True], "float16")
    assert half.inputs[0] is not x and half.inputs[0].dtype.name == "float16"
    assert half.inverse_map(half.inputs[0]) is given and list(half.inverse_maps) == [half.inputs[0]]


def _bucket(x, table):
    """y[i] = table[int(x[i])]: an integer table read at indices computed from floats
    (a histogram's or a bucketizer's read)."""
    a = tensor_input("a", x.dtype, x.shape)
    t = tensor_input("t", table.dtype, table.shape)
    y = compute("y", x.shape, lambda i: t[cast(a[i], dtypes.int32)])
    return Operator("bucket", [x, table], Task("bucket", [a, t], [y])).outputs[0]


def test_an_integer_table_read_at_indices_from_converted_floats(rng):
    x = hf.symbol((9,), "float32", name="x")
    table = hf.symbol((5,), "int64", name="table")
    g = hf.trace(_bucket(x, table), inputs=[x, table])
    fn = hf.compile(g, target="cpu", dtype="float16")
    xv = rng.uniform(0, 4.99, 9).astype(np.float16)
    tv = rng.integers(-50, 50, 5).astype(np.int64)
    np.testing.assert_array_equal(fn(xv, tv), tv[xv.astype(np.int64)])


def test_the_pass_counts_the_operators_it_rebuilt(dummy):
    ids = hf.symbol((4,), "int64", name="ids")
    x = hf.symbol((4,), "float32", name="x")
    g = hf.trace([hf.ops.add(ids, ids), dummy.scale(dummy.add(x, x))], inputs=[ids, x])
    ctx = GraphPassContext()
    convert_float_dtype(g, "float16", ctx)
    assert ctx.stats == {"convert_float_dtype": {"rebuilt": 2}}       # the integer add is shared
    convert_float_dtype(g, "bfloat16", ctx)
    assert ctx.stats == {"convert_float_dtype": {"rebuilt": 4}}
    empty = GraphPassContext()
    convert_float_dtype(hf.trace(hf.ops.add(ids, ids), inputs=[ids]), "float16", empty)
    assert empty.stats == {"convert_float_dtype": {"rebuilt": 0}}


def test_nans_with_payloads_become_the_quiet_nan_of_their_sign():
    """Rounding a NaN's bits would carry a low payload into the exponent (an infinity)
    or past the sign (-0.0); every NaN becomes 0x7FC0 or 0xFFC0, so equal weights give
    equal bytes."""
    payloads = np.array([0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001, 0x7FC10000, 0xFFBF8000, 0x7F808000],
                        np.uint32)
    bits = float32_to_bfloat16_bits(payloads.view(np.float32))
    assert bits.tolist() == [0x7FC0, 0x7FC0, 0xFFC0, 0xFFC0, 0x7FC0, 0xFFC0, 0x7FC0]
    assert np.isnan(_bf16_to_float(bits)).all()


def test_a_cast_to_float32_in_a_half_model_rounds_through_float32(rng):
    """cast(x64, "float32") in a float16 model: the value is rounded to float32 as the
    model says, then once more to float16 (not straight from float64: the two differ
    where the float32 rounding lands on a float16 tie)."""
    x = hf.symbol((6,), "float64", name="x")
    fn = hf.compile(hf.trace(hf.ops.cast(x, "float32"), inputs=[x]), target="cpu", dtype="float16")
    ties = 1.0 + 2.0 ** -11 + np.array([2.0 ** -30, -2.0 ** -30, 2.0 ** -40, 0.0, 2.0 ** -25, -2.0 ** -26])
    assert not np.array_equal(ties.astype(np.float16), ties.astype(np.float32).astype(np.float16))
    got = fn(ties)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, ties.astype(np.float32).astype(np.float16))
