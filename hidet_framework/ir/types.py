"""Types beyond scalars: pointers and tensors (a tensor type carries its layout)."""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Union

import attrs

from hidet_framework.ir.dtypes import DataType, data_type

if TYPE_CHECKING:  # layouts hold expressions, so they live beside them
    from hidet_framework.mapping.layout import Layout


class Scope(enum.Enum):
    """Where a declared variable or tensor lives.

    ``GLOBAL``: device/main memory reached through a pointer (kernel parameters);
    ``SHARED``: CUDA shared memory of a thread block; ``REGISTER``: per-thread registers
    (a small array in C); ``LOCAL``: a function-local variable or array.
    """

    GLOBAL = "global"
    SHARED = "shared"
    REGISTER = "register"
    LOCAL = "local"


@attrs.frozen(slots=True, eq=False)
class PointerType:
    """A pointer to values of `base` (a `DataType`, another pointer, or ``None`` for
    ``void*``)."""

    base: Union[DataType, "PointerType", None]

    def __str__(self) -> str:
        return f"{self.base if self.base is not None else 'void'}*"


@attrs.frozen(slots=True, eq=False)
class TensorType:
    """A multi-dimensional array of `dtype`.

    :param dtype: element type.
    :param shape: extents; Python ints or integer expressions.
    :param layout: maps indices to an element offset; ``None`` means row-major over
        `shape` (``hidet_framework.mapping.layout.layout_of`` gives either). The IR
        never imports the layout algebra: it sits above the IR.
    """

    dtype: DataType = attrs.field(converter=data_type)
    shape: tuple = attrs.field(converter=tuple)
    layout: "Layout | None" = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        return f"{self.dtype.short}[{dims}]"


Type = Union[DataType, PointerType, TensorType]


def tensor_type(dtype: Any, shape: Any, layout: "Layout | None" = None) -> TensorType:
    return TensorType(data_type(dtype), tuple(shape), layout)


def pointer_type(base: Any) -> PointerType:
    if base is None or isinstance(base, (DataType, PointerType)):
        return PointerType(base)
    return PointerType(data_type(base))
