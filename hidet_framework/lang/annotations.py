"""Type annotations of script parameters and locals: ``f32[m, k]``, ``~f16``, ``int32``.

`DataType` objects of the IR are plain frozen records, so the DSL wraps each in a
`DTypeAnnotation` that adds the annotation syntax (``[...]`` for tensors, ``~`` for
pointers, a call for casts). The wrapper keeps a ``name`` attribute, so
``ir.data_type(f32)`` and every IR builder accept it wherever a dtype is expected.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType, data_type
from hidet_framework.ir.expr import Expr, cast, const
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import PointerType, TensorType


class DTypeAnnotation:
    """A dtype usable in annotations: ``f32`` (scalar), ``f32[4, n]`` (tensor),
    ``~f32`` (pointer), and ``f32(x)`` (cast / typed constant)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: DataType) -> None:
        self.dtype = dtype

    @property
    def name(self) -> str:  # lets ir.data_type() accept the annotation itself
        return self.dtype.name

    def __getitem__(self, shape: Any) -> TensorType:
        if not isinstance(shape, tuple):
            shape = (shape,)
        return TensorType(self.dtype, tuple(shape))

    def __invert__(self) -> PointerType:
        return PointerType(self.dtype)

    def __call__(self, value: Any) -> Expr:
        """``f16(x)``: a typed constant for a Python number, else a cast."""
        if isinstance(value, Expr):
            return cast(value, self.dtype)
        return const(value, self.dtype)

    def __repr__(self) -> str:
        return self.dtype.short


boolean = DTypeAnnotation(dtypes.boolean)
i8 = int8 = DTypeAnnotation(dtypes.int8)
i16 = int16 = DTypeAnnotation(dtypes.int16)
i32 = int32 = DTypeAnnotation(dtypes.int32)
i64 = int64 = DTypeAnnotation(dtypes.int64)
u8 = uint8 = DTypeAnnotation(dtypes.uint8)
u16 = uint16 = DTypeAnnotation(dtypes.uint16)
u32 = uint32 = DTypeAnnotation(dtypes.uint32)
u64 = uint64 = DTypeAnnotation(dtypes.uint64)
f16 = float16 = DTypeAnnotation(dtypes.float16)
bf16 = bfloat16 = DTypeAnnotation(dtypes.bfloat16)
f32 = float32 = DTypeAnnotation(dtypes.float32)
f64 = float64 = DTypeAnnotation(dtypes.float64)

# Python's own scalar types read as the C defaults, so `n: int` works too.
_PYTHON_TYPES = {int: dtypes.int32, float: dtypes.float32, bool: dtypes.boolean}


def resolve_type(value: Any) -> Any:
    """The IR type an evaluated annotation denotes: a `DataType`, `PointerType` or
    `TensorType`. Raises TypeError (with what was given) otherwise."""
    if isinstance(value, DTypeAnnotation):
        return value.dtype
    if isinstance(value, (DataType, PointerType)):
        return value
    if isinstance(value, TensorType):
        check_shape(value.shape)
        return value
    if isinstance(value, type) and value in _PYTHON_TYPES:
        return _PYTHON_TYPES[value]
    if isinstance(value, str):
        return data_type(value)
    raise TypeError(f"{value!r} is not a type annotation (expected e.g. f32, ~f16, f32[m, k] or int32)")


def resolve_dtype(value: Any) -> DataType:
    """A scalar dtype from an annotation object, `DataType` or name."""
    t = resolve_type(value)
    if not isinstance(t, DataType):
        raise TypeError(f"expected a scalar dtype, got {t}")
    return t


def check_shape(shape: tuple) -> None:
    """Tensor extents must be non-negative ints or integer IR expressions."""
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, Expr)):
            raise TypeError(f"tensor shape entries must be ints or int32 parameters; got {d!r} "
                            f"({type(d).__name__}) in shape {tuple(shape)}")
        if isinstance(d, int) and d < 0:
            raise TypeError(f"tensor shape entries must be non-negative; got {d} in shape {tuple(shape)}")
        if isinstance(d, Expr):
            t = infer_type(d)
            if not (isinstance(t, DataType) and t.is_integer()):
                raise TypeError(f"tensor shape entry {d} has type {t}, not an integer type")
