"""Scalar and vector data types.

A `DataType` is the type of a scalar value (or of a short SIMD vector of scalars when
``lanes > 1``). Types are interned: ``data_type("float32") is float32``.
"""
from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen(slots=True)
class DataType:
    """A scalar type, or a vector of `lanes` scalars of type `element`.

    :param name: canonical name, e.g. ``float32`` or ``float32x4``.
    :param short: short name used in annotations and printing, e.g. ``f32``.
    :param kind: ``bool``, ``int``, ``uint`` or ``float``.
    :param bits: width of one lane in bits.
    :param lanes: number of lanes; 1 for scalars.
    """

    name: str
    short: str
    kind: str
    bits: int
    lanes: int = 1

    @property
    def nbytes(self) -> int:
        return max(1, self.bits // 8) * self.lanes

    @property
    def element(self) -> "DataType":
        """The scalar type of one lane."""
        return self if self.lanes == 1 else data_type(self.name.rsplit("x", 1)[0])

    def is_float(self) -> bool:
        return self.kind == "float"

    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    def is_signed(self) -> bool:
        return self.kind in ("int", "float")

    def is_bool(self) -> bool:
        return self.kind == "bool"

    def is_vector(self) -> bool:
        return self.lanes > 1

    @property
    def numpy_name(self) -> str:
        """The numpy dtype name used to store values of this type (bfloat16 is stored as
        uint16 bit patterns, since numpy has no bfloat16)."""
        if self.lanes != 1:
            raise TypeError(f"vector type {self.name} has no numpy equivalent")
        return "uint16" if self.name == "bfloat16" else self.name

    def min_value(self) -> Any:
        if self.kind == "bool":
            return False
        if self.kind == "uint":
            return 0
        if self.kind == "int":
            return -(1 << (self.bits - 1))
        return float("-inf")

    def max_value(self) -> Any:
        if self.kind == "bool":
            return True
        if self.kind == "uint":
            return (1 << self.bits) - 1
        if self.kind == "int":
            return (1 << (self.bits - 1)) - 1
        return float("inf")

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name


_BY_NAME: dict[str, DataType] = {}


def _define(name: str, short: str, kind: str, bits: int) -> DataType:
    t = DataType(name, short, kind, bits)
    _BY_NAME[name] = t
    _BY_NAME[short] = t
    return t


boolean = _define("bool", "bool", "bool", 8)
int8 = _define("int8", "i8", "int", 8)
int16 = _define("int16", "i16", "int", 16)
int32 = _define("int32", "i32", "int", 32)
int64 = _define("int64", "i64", "int", 64)
uint8 = _define("uint8", "u8", "uint", 8)
uint16 = _define("uint16", "u16", "uint", 16)
uint32 = _define("uint32", "u32", "uint", 32)
uint64 = _define("uint64", "u64", "uint", 64)
float16 = _define("float16", "f16", "float", 16)
bfloat16 = _define("bfloat16", "bf16", "float", 16)
float32 = _define("float32", "f32", "float", 32)
float64 = _define("float64", "f64", "float", 64)

SCALAR_TYPES: tuple[DataType, ...] = (
    boolean, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64,
)


def vector_type(element: DataType | str, lanes: int) -> DataType:
    """The vector of `lanes` elements of `element` (``float32x4``); interned."""
    element = data_type(element)
    if element.lanes != 1:
        raise TypeError(f"cannot make a vector of vector type {element}")
    if lanes < 1:
        raise ValueError(f"vector lanes must be positive, got {lanes}")
    if lanes == 1:
        return element
    name = f"{element.name}x{lanes}"
    if name not in _BY_NAME:
        t = DataType(name, f"{element.short}x{lanes}", element.kind, element.bits, lanes)
        _BY_NAME[name] = t
        _BY_NAME[t.short] = t
    return _BY_NAME[name]


def data_type(value: DataType | str | Any) -> DataType:
    """Resolve a name (``"float32"``, ``"f32"``, ``"float32x4"``), a numpy dtype or a
    `DataType` to the interned `DataType`."""
    if isinstance(value, DataType):
        return value
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if name is None:
        name = getattr(getattr(value, "dtype", None), "name", None)
    if not isinstance(name, str):
        raise TypeError(f"cannot interpret {value!r} as a data type")
    if name in _BY_NAME:
        return _BY_NAME[name]
    if "x" in name:
        base, _, lanes = name.rpartition("x")
        if lanes.isdigit() and base in _BY_NAME:
            return vector_type(base, int(lanes))
    raise TypeError(f"unknown data type {name!r}; known: {', '.join(t.name for t in SCALAR_TYPES)}")


_FLOAT_RANK = {float16: 1, bfloat16: 1, float32: 2, float64: 3}


def promote(a: DataType, b: DataType) -> DataType:
    """The type of a binary arithmetic result (like C/numpy: float beats int, wider
    beats narrower; float16 with bfloat16 gives float32)."""
    if a is b:
        return a
    if a.lanes != b.lanes:
        if a.lanes == 1:
            return vector_type(promote(a, b.element), b.lanes)
        if b.lanes == 1:
            return vector_type(promote(a.element, b), a.lanes)
        raise TypeError(f"cannot combine vector types {a} and {b}")
    if a.lanes > 1:
        return vector_type(promote(a.element, b.element), a.lanes)
    if a.is_float() or b.is_float():
        if not b.is_float():
            return a
        if not a.is_float():
            return b
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if _FLOAT_RANK[a] >= _FLOAT_RANK[b] else b
    if a.is_bool():
        return b
    if b.is_bool():
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    # same width, signed vs unsigned: C picks unsigned
    return a if a.kind == "uint" else b
