"""Compute definitions and tasks at their edges, checked directly (no compiler): what
extents and index functions are refused, the accumulator types, injectivity, stages,
inlining, the inverse index maps epilogue fusion relies on (and every look-alike that
is not a bijection), zero-size and broadcast shapes, and what the fingerprint must and
must not see. Written to kill mutants of compute/ (issue 12)."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.analysis.evaluator import Buffer, evaluate_expr
from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.compute.definitions import (
    REDUCE_KINDS, ReduceCompute, contains_reduce, default_acc_dtype, substitute_compute, tensors_read,
)
from hidet_framework.ir import dtypes, var
from hidet_framework.ir.expr import Cast, TensorElement, const


def test_extents_must_be_non_negative_ints_or_expressions():
    n = var("n")
    assert tensor_input("a", "float32", [0, 3]).shape == (0, 3)
    assert tensor_input("a", "float32", [n, 1]).shape == (n, 1)
    with pytest.raises(ValueError, match="non-negative, got -1"):
        tensor_input("a", "float32", [2, -1])
    for bad in (True, 2.0, "3", None):
        with pytest.raises(TypeError, match="ints or integer expressions"):
            tensor_input("a", "float32", [bad])
    with pytest.raises(ValueError):
        compute("c", [-2], lambda i: const(1.0))


def test_index_functions_must_match_the_rank():
    with pytest.raises(TypeError, match="takes 1 indices; the shape has 2 dimensions"):
        compute("c", [2, 3], lambda i: const(1.0))
    c = compute("c", [2, 3], lambda *idx: idx[0] + idx[1])
    assert [a.hint for a in c.definition.axes] == ["i0", "i1"]
    r = reduce([4, 5], lambda *rs: rs[0] * rs[1])
    assert [a.hint for a in r.axes] == ["r0", "r1"] and r.extents == (4, 5)
    named = compute("c", [2], lambda row: row * 2)
    assert named.definition.axes[0].hint == "row" and named.definition.axes[0].type is dtypes.int32
    with pytest.raises(TypeError, match="must be a scalar"):
        a = tensor_input("a", "float32", [2])
        compute("c", [2], lambda i: a)


def test_compute_dtype_default_and_cast():
    a = tensor_input("a", "float16", [3])
    c = compute("c", [3], lambda i: a[i])
    assert c.dtype is dtypes.float16 and not isinstance(c.definition.value, Cast)
    d = compute("d", [3], lambda i: a[i], dtype="float32")
    assert d.dtype is dtypes.float32 and isinstance(d.definition.value, Cast)
    e = compute("e", [3], lambda i: a[i], dtype="float16")
    assert not isinstance(e.definition.value, Cast)
    assert c.name == "c" and not c.is_input() and a.is_input()


@pytest.mark.parametrize("dtype, kind, acc", [
    ("float16", "sum", "float32"), ("bfloat16", "mean", "float32"), ("float16", "prod", "float32"),
    ("float16", "max", "float16"), ("bfloat16", "min", "bfloat16"), ("float32", "sum", "float32"),
    ("float64", "sum", "float64"), ("bool", "sum", "int32"), ("bool", "max", "bool"),
    ("int8", "sum", "int8"), ("int32", "prod", "int32"),
])
def test_accumulator_types(dtype, kind, acc):
    assert default_acc_dtype(dtypes.data_type(dtype), kind) is dtypes.data_type(acc)
    a = tensor_input("a", dtype, [4])
    assert reduce([4], lambda r: a[r], kind).acc_dtype is dtypes.data_type(acc)


def test_reduce_kinds_and_explicit_accumulator():
    assert REDUCE_KINDS == ("sum", "mean", "max", "min", "prod")
    a = tensor_input("a", "float16", [4])
    with pytest.raises(ValueError, match="unknown reduction 'avg'; known: sum, mean, max, min, prod"):
        reduce([4], lambda r: a[r], "avg")
    r = reduce([4], lambda r: a[r], "sum", acc_dtype="float64")
    assert r.acc_dtype is dtypes.float64 and r.infer_type() is dtypes.float64 and r.kind == "sum"


def _matmul(m=3, k=4, n=5):
    a, b = tensor_input("a", "float32", [m, k]), tensor_input("b", "float32", [k, n])
    c = compute("c", [m, n], lambda i, j: reduce([k], lambda r: a[i, r] * b[r, j]))
    return a, b, c


def test_tensors_read_and_contains_reduce():
    a, b, c = _matmul()
    assert tensors_read(c.definition.value) == [a, b] and contains_reduce(c.definition.value)
    d = compute("d", [3, 5], lambda i, j: c[i, j] + c[i, j] * 2.0)
    assert tensors_read(d.definition.value) == [c] and not contains_reduce(d.definition.value)
    s = substitute_compute(c.definition.value, {c.definition.axes[0]: const(2)})
    assert isinstance(s, ReduceCompute) and "2" in str(s)
    assert substitute_compute(c.definition.value, {}) is c.definition.value


def test_task_checks_its_outputs_and_inputs():
    a, b, c = _matmul()
    with pytest.raises(TypeError, match="outputs must be computed tensors"):
        Task("t", [a], [a])
    with pytest.raises(ValueError, match=r"not among its inputs: \['b'\]"):
        Task("t", [a], [c])
    t = Task("mm", [a, b], [c])
    assert t.tensors() == [a, b, c] and not t.is_injective() and t.stages() == [c]


def test_stages_are_outputs_and_reductions_read_by_others():
    a, b, c = _matmul()
    relu = compute("relu", [3, 5], lambda i, j: c[i, j] * 2.0)
    t = Task("mm_relu", [a, b], [relu])
    assert t.stages() == [c, relu]
    x = tensor_input("x", "float32", [4])
    y = compute("y", [4], lambda i: x[i] + 1.0)
    z = compute("z", [4], lambda i: y[i] * 3.0)
    t2 = Task("chain", [x], [z])
    assert t2.stages() == [z] and t2.is_injective()
    inlined = t2.inlined_value(z)
    assert tensors_read(inlined) == [x]
    xs = np.arange(4.0)
    assert evaluate_expr(inlined, {z.definition.axes[0]: 2, x: Buffer(xs, x.type)}) == (2.0 + 1.0) * 3.0
    t3 = Task("both", [x], [y, z])   # an output is never inlined into another
    assert tensors_read(t3.inlined_value(z)) == [y] and t3.stages() == [y, z]


def test_inverse_map_of_elementwise_and_permutation():
    x = tensor_input("x", "float32", [2, 3])
    y = compute("y", [3, 2], lambda i, j: x[j, i] * 2.0)
    inv = Task("transpose", [x], [y]).inverse_map(x)
    assert inv is not None and len(inv.axes) == 2
    assert inv.out_indices == (inv.axes[1], inv.axes[0])
    e = compute("e", [2, 3], lambda i, j: x[i, j] + 1.0)
    inv = Task("ew", [x], [e]).inverse_map(x)
    assert inv.out_indices == inv.axes and [a.hint for a in inv.axes] == ["j0", "j1"]
    assert Task("ew", [x], [e]).is_bijective(x)


def test_look_alikes_are_not_bijections():
    x = tensor_input("x", "float32", [3, 3])
    v = tensor_input("v", "float32", [3])
    cases = [
        compute("twice", [3, 3], lambda i, j: x[i, j] + x[j, i]),     # two reads
        compute("diag", [3, 3], lambda i, j: x[i, i]),                # an axis missing
        compute("shift", [3, 3], lambda i, j: x[i, (j + 1) % 3]),     # not a plain axis
        compute("bcast", [3, 3], lambda i, j: v[j] + x[i, j] * 0.0),  # v: broadcast
    ]
    for out in cases:
        reads = [t for t in tensors_read(out.definition.value)]
        task = Task(out.name, reads, [out])
        assert task.inverse_map(reads[0]) is None, out.name
    bc = cases[3]
    assert Task("b", [v, x], [bc]).inverse_map(v) is None
    # a permutation whose extents do not line up (3x4 read as 4x3 through a transpose of a 4x3 output)
    r = tensor_input("r", "float32", [3, 4])
    wide = compute("wide", [3, 4], lambda i, j: r[i, j])
    assert Task("w", [r], [wide]).inverse_map(r) is not None
    y = tensor_input("y", "float32", [4, 4])
    sq = compute("sq", [4, 3], lambda i, j: y[i, j])   # reads 4x3 of 4x4: not onto
    assert Task("sq", [y], [sq]).inverse_map(y) is None
    n = var("n")
    s = tensor_input("s", "float32", [n])
    assert Task("sym", [s], [compute("o", [n], lambda i: s[i])]).inverse_map(s) is None
    a, b, c = _matmul()
    assert Task("mm", [a, b], [c]).inverse_map(a) is None
    two = Task("two", [x], [compute("p", [3, 3], lambda i, j: x[i, j]), compute("q", [3, 3], lambda i, j: x[i, j])])
    assert two.inverse_map(x) is None


def test_zero_size_and_broadcast_tasks():
    x = tensor_input("x", "float32", [0, 4])
    b = tensor_input("b", "float32", [1, 4])
    y = compute("y", [0, 4], lambda i, j: x[i, j] + b[0, j])
    t = Task("add0", [x, b], [y])
    assert t.is_injective() and t.inverse_map(x) is not None and t.inverse_map(b) is None
    assert y.shape == (0, 4)


def test_given_inverse_maps_win():
    from hidet_framework.compute.task import InverseMap

    x = tensor_input("x", "float32", [6])
    y = compute("y", [2, 3], lambda i, j: x[i * 3 + j])
    assert Task("reshape", [x], [y]).inverse_map(x) is None
    j0 = var("j0")
    given = InverseMap((j0,), (j0 / 3, j0 % 3))
    assert Task("reshape", [x], [y], inverse_maps={x: given}).inverse_map(x) is given


def _fp(shape=(3,), dtype="float32", scale=2.0, attrs=None, name="t", xname="x"):
    x = tensor_input(xname, dtype, list(shape))
    y = compute("y", list(shape), lambda *i: x[i] * scale)
    return Task(name, [x], [y], attributes=attrs or {}).fingerprint()


def test_fingerprint_sees_math_shapes_types_attributes_not_names():
    base = _fp()
    assert len(base) == 24 and base == _fp()
    assert _fp(name="other", xname="z") == base
    assert _fp(shape=(4,)) != base and _fp(dtype="float16") != base and _fp(scale=3.0) != base
    assert _fp(attrs={"axis": 1}) != base and _fp(attrs={"axis": 1}) != _fp(attrs={"axis": 2})
    assert _fp(attrs={"a": 1, "b": 2}) == _fp(attrs={"b": 2, "a": 1})
    assert _fp(attrs={"axis": 1}) != _fp(attrs={"axis": "1"})


def test_fingerprint_sees_attribute_names_and_reductions_are_never_inlined():
    assert _fp(attrs={"axis": 1}) != _fp(attrs={"dim": 1})
    a, b, c = _matmul()
    relu = compute("relu", [3, 5], lambda i, j: c[i, j] * 2.0)
    t = Task("mm_relu", [a, b], [relu])
    assert tensors_read(t.inlined_value(relu)) == [c]   # a reduction stays a stage of its own


def test_fingerprint_is_remembered_per_task_until_its_attributes_change(monkeypatch):
    from hidet_framework.compute import task as task_module

    calls = []
    real_hash = task_module.structural_hash
    monkeypatch.setattr(task_module, "structural_hash", lambda node: calls.append(1) or real_hash(node))

    def make(shape, attributes):
        x = tensor_input("x", "float32", list(shape))
        return Task("t", [x], [compute("y", list(shape), lambda *i: x[i] * 2.0)], attributes=attributes)

    t = make((3,), {"axis": 1})
    first = t.fingerprint()
    assert t.fingerprint() == first and len(calls) == 1      # the second call hashes nothing
    # another task of the same name (and same attributes) but another shape has its own
    other = make((5,), {"axis": 1})
    assert other.fingerprint() != first and len(calls) == 2
    # attributes are a mutable mapping: a change is seen, and equals a fresh task's value
    t.attributes["axis"] = 2
    changed = t.fingerprint()
    assert changed != first and changed == make((3,), {"axis": 2}).fingerprint()
    t.attributes["axis"] = 1
    assert t.fingerprint() == first
