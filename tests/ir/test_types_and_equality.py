"""The IR's data types, type inference and structural equality at their edges: every
promotion rule (float beats int, wider beats narrower, unsigned wins a tie, float16
with bfloat16 gives float32, scalars widen to vectors), type ranges, name lookup,
vector types, each expression's inferred type and the errors, and when two trees are
(not) equal or hash alike. Written to kill mutants of ir/ (issue 12)."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import data_type, promote, vector_type
from hidet_framework.ir.equality import (
    StructuralMismatch, assert_structural_equal, structural_equal, structural_hash,
)
from hidet_framework.ir.expr import (
    Address, BinaryOp, Call, Cast, Dereference, IfThenElse, TensorElement, TensorSlice, UnaryOp, const, var,
)
from hidet_framework.ir.type_infer import cast_if_needed, infer_type
from hidet_framework.ir.types import PointerType, TensorType

D = dtypes


@pytest.mark.parametrize("a, b, want", [
    ("int8", "int32", "int32"), ("int32", "int8", "int32"), ("int64", "int32", "int64"),
    ("int32", "uint32", "uint32"), ("uint32", "int32", "uint32"), ("uint8", "int32", "int32"),
    ("bool", "int8", "int8"), ("int16", "bool", "int16"), ("bool", "bool", "bool"),
    ("int64", "float16", "float16"), ("float32", "int8", "float32"),
    ("float16", "bfloat16", "float32"), ("bfloat16", "float16", "float32"),
    ("float16", "float32", "float32"), ("float64", "float32", "float64"), ("float32", "float64", "float64"),
    ("bfloat16", "float32", "float32"), ("float32", "bfloat16", "float32"), ("float16", "float16", "float16"),
    ("float32x4", "float32", "float32x4"), ("int32", "float32x8", "float32x8"),
    ("float16x4", "float32x4", "float32x4"), ("int8x2", "int32", "int32x2"),
])
def test_promotion(a, b, want):
    assert promote(data_type(a), data_type(b)) is data_type(want)


def test_vector_promotion_errors_and_vector_types():
    with pytest.raises(TypeError, match="cannot combine vector types"):
        promote(data_type("float32x4"), data_type("float32x8"))
    v = vector_type("float32", 4)
    assert v is data_type("float32x4") is data_type("f32x4") and v.short == "f32x4"
    assert v.element is D.float32 and v.lanes == 4 and v.is_vector() and not D.float32.is_vector()
    assert v.nbytes == 16 and D.boolean.nbytes == 1 and D.int64.nbytes == 8 and D.float16.nbytes == 2
    assert vector_type(D.int8, 1) is D.int8
    with pytest.raises(ValueError, match="lanes must be positive, got 0"):
        vector_type(D.int8, 0)
    with pytest.raises(TypeError, match="vector of vector"):
        vector_type(v, 2)
    with pytest.raises(TypeError, match="no numpy equivalent"):
        v.numpy_name


def test_names_and_lookup():
    assert data_type("f16") is D.float16 and data_type("bfloat16") is D.bfloat16 and data_type(D.int8) is D.int8
    assert data_type(np.dtype("int16")) is D.int16 and data_type(np.zeros(2, "uint8")) is D.uint8
    assert D.bfloat16.numpy_name == "uint16" and D.float16.numpy_name == "float16"
    assert str(D.int32) == "int32" and repr(D.uint64) == "uint64"
    for bad in ("float31", "floatx4", "int32xq", "nosuchx4"):
        with pytest.raises(TypeError, match="unknown data type"):
            data_type(bad)
    with pytest.raises(TypeError, match="cannot interpret 3"):
        data_type(3)


@pytest.mark.parametrize("name, lo, hi", [
    ("bool", False, True), ("int8", -128, 127), ("uint8", 0, 255), ("int16", -32768, 32767),
    ("uint16", 0, 65535), ("int32", -(2**31), 2**31 - 1), ("uint64", 0, 2**64 - 1), ("int64", -(2**63), 2**63 - 1),
])
def test_type_ranges(name, lo, hi):
    t = data_type(name)
    assert t.min_value() == lo and t.max_value() == hi


def test_kinds():
    assert D.float16.is_float() and not D.int8.is_float() and D.uint8.is_integer() and D.int8.is_integer()
    assert not D.boolean.is_integer() and D.boolean.is_bool() and not D.int8.is_bool()
    assert D.int8.is_signed() and D.float32.is_signed() and not D.uint8.is_signed() and not D.boolean.is_signed()
    assert D.float32.min_value() == float("-inf") and D.float32.max_value() == float("inf")


def test_inferred_types():
    i, x8, f = var("i"), var("x8", "int8"), var("f", "float32")
    p = var("p", PointerType(D.float16))
    t = var("t", TensorType(D.float32, (4, 6)))
    assert infer_type(i < 3) is D.boolean and infer_type(BinaryOp("and", i < 3, i < 4)) is D.boolean
    assert infer_type(x8 + const(1)) is D.int32 and infer_type(x8 + const(1, "int8")) is D.int8
    assert infer_type(BinaryOp("shl", x8, const(2))) is D.int8 and infer_type(BinaryOp("shr", x8, i)) is D.int8
    assert infer_type(i * f) is D.float32
    assert infer_type(UnaryOp("not", i)) is D.boolean and infer_type(UnaryOp("neg", x8)) is D.int8
    assert infer_type(Cast(i, D.float16)) is D.float16 and infer_type(Call("g", (), D.int64)) is D.int64
    assert infer_type(TensorElement(t, (const(0), const(1)))) is D.float32
    assert infer_type(TensorElement(p, (const(0),))) is D.float16
    assert infer_type(BinaryOp("add", p, i)) is p.type and infer_type(BinaryOp("sub", p, i)) is p.type
    assert infer_type(IfThenElse(i < 3, x8, const(1, "int8"))) is D.int8
    assert infer_type(IfThenElse(i < 3, x8, i)) is D.int32
    addr = Address(TensorElement(t, (const(0), const(0))))
    assert isinstance(infer_type(addr), PointerType) and infer_type(addr).base is D.float32 and infer_type(Dereference(p)) is D.float16
    with pytest.raises(TypeError, match="cannot dereference"):
        infer_type(Dereference(i))
    with pytest.raises(TypeError, match="cannot index"):
        infer_type(TensorElement(i, (const(0),)))
    with pytest.raises(TypeError, match="arithmetic on a non-scalar"):
        infer_type(t + 1)
    with pytest.raises(TypeError, match="arithmetic on a non-scalar"):
        infer_type(BinaryOp("mul", p, i))


def test_slice_types():
    t = var("t", TensorType(D.float32, (4, 6, 5)))
    s = TensorSlice(t, (const(1), None, None), (None, const(2), None), (None, const(5), None))
    st = infer_type(s)
    assert st.dtype is D.float32 and len(st.shape) == 2
    assert int(st.shape[1]) == 5
    with pytest.raises(TypeError, match="only tensors can be sliced"):
        infer_type(TensorSlice(var("i"), (None,), (None,), (None,)))


def test_cast_if_needed():
    i = var("i")
    assert cast_if_needed(i, D.int32) is i
    c = cast_if_needed(i, D.int64)
    assert isinstance(c, Cast) and c.dtype is D.int64 and c.expr is i
    assert infer_type(cast_if_needed(3, D.int32)) is D.int32


def test_structural_equality_and_hash():
    a, b, c = var("a"), var("b"), var("c")
    assert structural_equal(a + 1, b + 1) and structural_hash(a + 1) == structural_hash(b + 1)
    assert not structural_equal(a + 1, b + 2) and structural_hash(a + 1) != structural_hash(b + 2)
    assert structural_equal(a + a, b + b) and not structural_equal(a + a, b + c)
    assert not structural_equal(a + b, c + c)                # one to one, both ways
    assert structural_hash(a + a) != structural_hash(b + c)
    assert not structural_equal(a, var("f", "float32"))      # variable types must agree
    assert not structural_equal(a + 1, a - 1) and not structural_equal(a + 1, a)
    assert not structural_equal(const(1), const(1, "int64")) and structural_hash(const(1)) != structural_hash(const(1, "int64"))
    assert not structural_equal((a, 1), (b, 1, 2)) and structural_equal([a, 1], [b, 1])
    assert structural_equal({"k": a}, {"k": b}) and not structural_equal({"k": a}, {"j": b})
    assert not structural_equal(1, 1.0) and not structural_equal(a, 1)
    assert structural_hash({"k": 1}) != structural_hash({"j": 1}) and structural_hash([1, 2]) != structural_hash([1, [2]])
    with pytest.raises(StructuralMismatch) as info:
        assert_structural_equal(a + (b * 2), c + (c * 3))
    assert info.value.path in ("b.a", "b.b")
    with pytest.raises(StructuralMismatch, match="IR differs at b.b.value: 2 vs 3"):
        assert_structural_equal(a + (b * 2), a + (b * 3))
    with pytest.raises(StructuralMismatch, match="<root>: BinaryOp vs Constant"):
        assert_structural_equal(a + 1, const(1))
    with pytest.raises(StructuralMismatch, match=r"\.\.\."):
        assert_structural_equal(const(1), const(10**90))
