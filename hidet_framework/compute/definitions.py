"""Compute definitions: the math of an operator, written once.

    a = tensor_input("a", "float32", [m, k])
    b = tensor_input("b", "float32", [k, n])
    c = compute("c", [m, n], lambda i, j: reduce([k], lambda r: a[i, r] * b[r, j], "sum"))

A tensor is a `TensorNode`: an IR variable of tensor type that also carries its
definition (none for inputs), so ``a[i, r]`` is an ordinary IR tensor element and
every IR tool applies to compute bodies. A reduction is a `ReduceCompute` expression
that may appear anywhere inside a definition.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence

import attrs

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType, data_type
from hidet_framework.ir.expr import Expr, Var, cast, convert, var
from hidet_framework.ir.functors import IRRewriter, IRVisitor, VarSubstituter
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import TensorType

REDUCE_KINDS = ("sum", "mean", "max", "min", "prod")


@attrs.frozen(slots=True, eq=False, repr=False)
class GridCompute:
    """``out[axes] = value`` for every point of the output shape.

    :param axes: one int32 variable per output dimension.
    :param value: the element value, an expression over `axes` and input elements.
    """

    axes: tuple
    value: Expr


@attrs.frozen(slots=True, eq=False, repr=False)
class TensorNode(Var):
    """A tensor of a compute graph: an input (``definition is None``) or computed."""

    definition: Optional[GridCompute] = None

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self) -> DataType:
        return self.type.dtype

    @property
    def name(self) -> str:
        return self.hint

    def is_input(self) -> bool:
        return self.definition is None


@attrs.frozen(slots=True, eq=False, repr=False)
class ReduceCompute(Expr):
    """A reduction of `value` over `axes` (ranging over `extents`).

    :param kind: one of `REDUCE_KINDS`.
    :param acc_dtype: accumulator type (float32 for low-precision floats by default).
    """

    axes: tuple
    extents: tuple
    value: Expr
    kind: str = attrs.field(validator=attrs.validators.in_(REDUCE_KINDS))
    acc_dtype: DataType = attrs.field(converter=data_type)

    def infer_type(self) -> DataType:
        return self.acc_dtype


def _shape(shape: Sequence[Any]) -> tuple:
    out = []
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, (int, Expr)):
            raise TypeError(f"tensor extents must be ints or integer expressions, got {s!r}")
        if isinstance(s, int) and s < 0:
            raise ValueError(f"tensor extents must be non-negative, got {s}")
        out.append(s)
    return tuple(out)


def tensor_input(name: str, dtype: Any, shape: Sequence[Any]) -> TensorNode:
    """An input tensor of a task."""
    return TensorNode(name, TensorType(data_type(dtype), _shape(shape)))


def _axes(fcompute: Callable, count: int, prefix: str) -> tuple:
    params = inspect.signature(fcompute).parameters
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params.values())
    if not varargs and len(params) != count:
        raise TypeError(f"the compute function takes {len(params)} indices; the shape has {count} dimensions")
    names = list(params) if not varargs else [f"{prefix}{d}" for d in range(count)]
    return tuple(var(n, dtypes.int32) for n in names[:count])


def compute(name: str, shape: Sequence[Any], fcompute: Callable[..., Any], dtype: Any = None) -> TensorNode:
    """A computed tensor: ``out[i...] = fcompute(i...)``. The dtype defaults to the
    value's type."""
    shape = _shape(shape)
    axes = _axes(fcompute, len(shape), "i")
    value = convert(fcompute(*axes))
    value_dtype = infer_type(value)
    if not isinstance(value_dtype, DataType):
        raise TypeError(f"compute {name!r}: the value must be a scalar, got {value_dtype}")
    out_dtype = data_type(dtype) if dtype is not None else value_dtype
    if dtype is not None and out_dtype is not value_dtype:
        value = cast(value, out_dtype)
    return TensorNode(name, TensorType(out_dtype, shape), GridCompute(axes, value))


def default_acc_dtype(dtype: DataType, kind: str) -> DataType:
    """Accumulate low-precision floats in float32 (sum/mean/prod); max/min keep the type."""
    if kind in ("max", "min"):
        return dtype
    if dtype.is_float() and dtype.bits < 32:
        return dtypes.float32
    if dtype.is_bool():
        return dtypes.int32
    return dtype


def reduce(shape: Sequence[Any], fcompute: Callable[..., Any], kind: str = "sum", acc_dtype: Any = None) -> ReduceCompute:
    """Reduce ``fcompute(r...)`` over the points of `shape` with `kind`."""
    if kind not in REDUCE_KINDS:
        raise ValueError(f"unknown reduction {kind!r}; known: {', '.join(REDUCE_KINDS)}")
    shape = _shape(shape)
    axes = _axes(fcompute, len(shape), "r")
    value = convert(fcompute(*axes))
    value_dtype = infer_type(value)
    acc = data_type(acc_dtype) if acc_dtype is not None else default_acc_dtype(value_dtype, kind)
    return ReduceCompute(axes, shape, value, kind, acc)


# ----------------------------------------------------------------------------------
# walking compute bodies: the IR functors plus ReduceCompute


class ComputeVisitor(IRVisitor):
    def visit_ReduceCompute(self, e: ReduceCompute) -> None:
        self.visit_seq(tuple(x for x in e.extents if isinstance(x, Expr)))
        self.visit(e.value)


class ComputeRewriter(IRRewriter):
    def visit_ReduceCompute(self, e: ReduceCompute) -> Expr:
        return self._rebuild(e, value=self.visit(e.value))


class _Substitute(ComputeRewriter, VarSubstituter):
    pass


def substitute_compute(e: Expr, mapping: dict) -> Expr:
    """`substitute` that also enters reductions."""
    return _Substitute(mapping).visit(e) if mapping else e


class _ReadsCollector(ComputeVisitor):
    def __init__(self) -> None:
        self.tensors: list[TensorNode] = []
        self.has_reduce = False

    def visit_TensorNode(self, e: TensorNode) -> None:
        if e not in self.tensors:
            self.tensors.append(e)

    def visit_ReduceCompute(self, e: ReduceCompute) -> None:
        self.has_reduce = True
        super().visit_ReduceCompute(e)


def tensors_read(e: Expr) -> list[TensorNode]:
    """Tensors whose elements `e` reads, in first-use order."""
    c = _ReadsCollector()
    c.visit(e)
    return c.tensors


def contains_reduce(e: Expr) -> bool:
    c = _ReadsCollector()
    c.visit(e)
    return c.has_reduce
