"""The type of an expression."""
from __future__ import annotations

from typing import Any

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType, promote
from hidet_framework.ir.expr import (
    BINARY_OPS, Address, BinaryOp, Call, Cast, Constant, Dereference, Expr, IfThenElse,
    TensorElement, TensorSlice, UnaryOp, Var, convert,
)
from hidet_framework.ir.types import PointerType, TensorType


def infer_type(e: Expr) -> Any:
    """The type of `e`: a `DataType`, `PointerType` or `TensorType`.

    A composite node's type is remembered on the node (`Expr._type`): nodes are immutable,
    and the simplifier asks for the type of every subtree of an index at each rewrite,
    which without it walks long grafted index chains again and again (the QKV group of
    BERT: 88 million calls, 90 s of codegen). It was a global memo by node until issue 11
    found that memo holding three quarters of a lowering process's objects alive (every
    tree it had typed), which every full garbage collection then scanned."""
    cls = type(e)
    if cls is Constant:
        return e.dtype
    if cls is Var:
        return e.type
    if not isinstance(e, Expr):
        return _infer_composite(e)  # raises: not an expression
    t = getattr(e, "_type", _UNSET)  # (a default, not try/except: cheaper when not asked yet)
    if t is _UNSET:
        if isinstance(e, (Constant, Var)):  # their subclasses
            return e.dtype if isinstance(e, Constant) else e.type
        t = _infer_composite(e)
        object.__setattr__(e, "_type", t)  # a cache beside the frozen fields, not one of them
    return t


_UNSET = object()


def _infer_composite(e: Expr) -> Any:
    if isinstance(e, BinaryOp):
        if BINARY_OPS[e.op][1]:
            return dtypes.boolean
        ta, tb = infer_type(e.a), infer_type(e.b)
        if isinstance(ta, PointerType) and e.op in ("add", "sub"):
            return ta  # pointer arithmetic
        if e.op in ("shl", "shr"):
            return ta
        return promote(_scalar(ta, e), _scalar(tb, e))
    if isinstance(e, UnaryOp):
        return dtypes.boolean if e.op == "not" else infer_type(e.a)
    if isinstance(e, Cast):
        return e.dtype
    if isinstance(e, Call):
        return e.ret_type
    if isinstance(e, TensorElement):
        t = infer_type(e.base)
        if isinstance(t, TensorType):
            return t.dtype
        if isinstance(t, PointerType):
            return t.base
        raise TypeError(f"cannot index a value of type {t}: {e}")
    if isinstance(e, TensorSlice):
        t = infer_type(e.base)
        if not isinstance(t, TensorType):
            raise TypeError(f"only tensors can be sliced, got {t}")
        shape = []
        for d, idx in enumerate(e.indices):
            if idx is None:
                start = e.starts[d] if e.starts[d] is not None else 0
                end = e.ends[d] if e.ends[d] is not None else t.shape[d]
                shape.append(end - start if not (isinstance(start, int) and start == 0) else end)
        return TensorType(t.dtype, tuple(shape))
    if isinstance(e, IfThenElse):
        ta, tb = infer_type(e.then_expr), infer_type(e.else_expr)
        return ta if ta is tb or not isinstance(ta, DataType) else promote(ta, tb)
    if isinstance(e, Address):
        return PointerType(infer_type(e.expr))
    if isinstance(e, Dereference):
        t = infer_type(e.ptr)
        if not isinstance(t, PointerType):
            raise TypeError(f"cannot dereference a value of type {t}")
        return t.base
    if hasattr(e, "infer_type"):  # expression kinds defined above the IR (compute reductions)
        return e.infer_type()
    raise TypeError(f"cannot infer the type of {type(e).__name__}")


def cast_if_needed(e: Any, t: Any) -> Expr:
    """`e` as a value of type `t`: `e` itself when it has that type already, else a
    `Cast` (so no conversion is left implicit, and none is added needlessly)."""
    e = convert(e)
    return e if infer_type(e) is t else Cast(e, t)


def _scalar(t: Any, e: Expr) -> DataType:
    if not isinstance(t, DataType):
        raise TypeError(f"arithmetic on a non-scalar value of type {t} in {e}")
    return t
