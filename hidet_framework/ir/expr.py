"""Expressions of the IR.

All nodes are immutable ``attrs`` classes compared by identity (a `Var` is one
variable wherever it appears); use ``hidet_framework.ir.equality.structural_equal``
to compare shapes of trees. Arithmetic operators on expressions build nodes, with
Python numbers converted to constants, so ``i * 4 + j`` is an IR tree. ``==`` stays
identity (nodes are dict keys): use ``equal(a, b)`` to build a comparison.
"""
from __future__ import annotations

from typing import Any, Union

import attrs

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType, data_type
from hidet_framework.ir.types import PointerType, TensorType, Type

# Binary operators: name -> (C spelling, result is boolean). The printer, the C
# generator and the evaluator all read this one table.
BINARY_OPS: dict[str, tuple[str, bool]] = {
    "add": ("+", False), "sub": ("-", False), "mul": ("*", False),
    "div": ("/", False), "mod": ("%", False),
    "min": ("min", False), "max": ("max", False),
    "bit_and": ("&", False), "bit_or": ("|", False), "bit_xor": ("^", False),
    "shl": ("<<", False), "shr": (">>", False),
    "eq": ("==", True), "ne": ("!=", True), "lt": ("<", True), "le": ("<=", True),
    "and": ("&&", True), "or": ("||", True),
}
UNARY_OPS: dict[str, str] = {"neg": "-", "not": "!", "bit_not": "~"}


class Node:
    """Base of every IR node (expressions, statements, functions, modules); prints
    through the IR printer."""

    __slots__ = ()

    def __str__(self) -> str:
        from hidet_framework.ir.printer import format_ir

        return format_ir(self)

    __repr__ = __str__


class Expr(Node):
    """Base of expressions; operators build IR."""

    # `infer_type`'s answer for this node, set on first use (nodes are immutable, so it never
    # changes): on the node, not in a global memo that kept every typed tree alive.
    __slots__ = ("_type",)

    def __add__(self, other): return BinaryOp("add", self, convert(other))
    def __radd__(self, other): return BinaryOp("add", convert(other), self)
    def __sub__(self, other): return BinaryOp("sub", self, convert(other))
    def __rsub__(self, other): return BinaryOp("sub", convert(other), self)
    def __mul__(self, other): return BinaryOp("mul", self, convert(other))
    def __rmul__(self, other): return BinaryOp("mul", convert(other), self)
    def __truediv__(self, other): return BinaryOp("div", self, convert(other))
    def __rtruediv__(self, other): return BinaryOp("div", convert(other), self)
    # Integer division in the IR truncates like C; indices are non-negative, where
    # truncation and flooring agree, so `//` maps onto it.
    def __floordiv__(self, other): return BinaryOp("div", self, convert(other))
    def __rfloordiv__(self, other): return BinaryOp("div", convert(other), self)
    def __mod__(self, other): return BinaryOp("mod", self, convert(other))
    def __rmod__(self, other): return BinaryOp("mod", convert(other), self)
    def __and__(self, other): return BinaryOp("bit_and", self, convert(other))
    def __or__(self, other): return BinaryOp("bit_or", self, convert(other))
    def __xor__(self, other): return BinaryOp("bit_xor", self, convert(other))
    def __lshift__(self, other): return BinaryOp("shl", self, convert(other))
    def __rshift__(self, other): return BinaryOp("shr", self, convert(other))
    def __lt__(self, other): return BinaryOp("lt", self, convert(other))
    def __le__(self, other): return BinaryOp("le", self, convert(other))
    def __gt__(self, other): return BinaryOp("lt", convert(other), self)
    def __ge__(self, other): return BinaryOp("le", convert(other), self)
    def __neg__(self): return UnaryOp("neg", self)
    def __invert__(self): return UnaryOp("bit_not", self)

    def __bool__(self) -> bool:
        raise TypeError(
            "an IR expression has no truth value at trace time; use logical_and/if_then_else "
            "or write the condition inside a @script function")

    def __getitem__(self, indices):
        return tensor_element_or_slice(self, indices)


@attrs.frozen(slots=True, eq=False, repr=False)
class Constant(Expr):
    """A literal. :param value: a Python bool, int or float. :param dtype: its type."""

    value: Any
    dtype: DataType = attrs.field(converter=data_type)


@attrs.frozen(slots=True, eq=False, repr=False)
class Var(Expr):
    """A variable; equal only to itself. :param hint: a readable name (not unique,
    not trusted: backends make their own identifiers). :param type: its type."""

    hint: str
    type: Type


@attrs.frozen(slots=True, eq=False, repr=False)
class BinaryOp(Expr):
    """``a <op> b``, `op` a key of `BINARY_OPS`."""

    op: str = attrs.field(validator=attrs.validators.in_(BINARY_OPS))
    a: Expr
    b: Expr


@attrs.frozen(slots=True, eq=False, repr=False)
class UnaryOp(Expr):
    """``<op> a``, `op` a key of `UNARY_OPS`."""

    op: str = attrs.field(validator=attrs.validators.in_(UNARY_OPS))
    a: Expr


@attrs.frozen(slots=True, eq=False, repr=False)
class Cast(Expr):
    """Convert `expr` to `dtype` (or to a pointer type)."""

    expr: Expr
    dtype: Union[DataType, PointerType]


@attrs.frozen(slots=True, eq=False, repr=False)
class Call(Expr):
    """Call a function of the module, or a primitive function a backend provides
    (``hidet_framework.ir.primitives``), by name.

    :param func: callee name. :param args: arguments. :param ret_type: result type
        (``None`` for void).
    """

    func: str
    args: tuple = attrs.field(converter=tuple)
    ret_type: Any = None


@attrs.frozen(slots=True, eq=False, repr=False)
class TensorElement(Expr):
    """One element ``base[i0, i1, ...]`` of a tensor or pointer."""

    base: Expr
    indices: tuple = attrs.field(converter=lambda xs: convert_all(xs))


@attrs.frozen(slots=True, eq=False, repr=False)
class TensorSlice(Expr):
    """A sub-tensor of `base`: dimension d is fixed to ``indices[d]`` when that is not
    ``None``, else kept with range ``[starts[d], ends[d])`` (``None`` ends = full)."""

    base: Expr
    indices: tuple = attrs.field(converter=tuple)
    starts: tuple = attrs.field(converter=tuple)
    ends: tuple = attrs.field(converter=tuple)


@attrs.frozen(slots=True, eq=False, repr=False)
class IfThenElse(Expr):
    """``cond ? then_expr : else_expr``."""

    cond: Expr
    then_expr: Expr
    else_expr: Expr


@attrs.frozen(slots=True, eq=False, repr=False)
class Address(Expr):
    """The address ``&expr`` of a tensor element or variable."""

    expr: Expr


@attrs.frozen(slots=True, eq=False, repr=False)
class Dereference(Expr):
    """The value ``*ptr``."""

    ptr: Expr


# ----------------------------------------------------------------------------------
# builders


def const(value: Any, dtype: Any = None) -> Constant:
    """A constant; the dtype defaults to bool / int32 / float32 by Python type."""
    if type(value) is int and (dtype is None or type(dtype) is DataType and dtype.kind in ("int", "uint")):
        if dtype is None:  # the common case (index arithmetic), without the general path's checks
            dtype = dtypes.int32 if -(2**31) <= value < 2**31 else dtypes.int64
        return Constant(value, dtype)
    if dtype is None:
        if isinstance(value, bool):
            dtype = dtypes.boolean
        elif isinstance(value, int):
            dtype = dtypes.int32 if -(2**31) <= value < 2**31 else dtypes.int64
        elif isinstance(value, float):
            dtype = dtypes.float32
        else:
            raise TypeError(f"cannot make a constant of {value!r}")
    dtype = data_type(dtype)
    if dtype.is_bool():
        value = bool(value)
    elif dtype.is_integer():
        value = int(value)
    else:
        value = float(value)
    return Constant(value, dtype)


def convert(value: Any) -> Expr:
    """An `Expr` as is; Python bool/int/float (and numpy scalars) as a `Constant`."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, int, float)):
        return const(value)
    if hasattr(value, "dtype") and getattr(value, "shape", None) == ():
        return const(value.item(), str(value.dtype))
    raise TypeError(f"cannot convert {value!r} ({type(value).__name__}) to an IR expression")


def convert_all(values: Any) -> tuple:
    """A tuple of `convert`ed values; a tuple of expressions as is (the rewriters rebuild
    accesses with their indices already expressions: a new tuple of the same items each
    time was a tenth of `flatten_tensor_index`, issue 11)."""
    if type(values) is tuple:
        for v in values:
            if not isinstance(v, Expr):
                break
        else:
            return values
    return tuple(convert(v) for v in values)


def var(hint: str, type: Any = "int32") -> Var:
    """A new variable; `type` is a `DataType`/name, `PointerType` or `TensorType`."""
    if not isinstance(type, (PointerType, TensorType)):
        type = data_type(type)
    return Var(hint, type)


def equal(a: Any, b: Any) -> BinaryOp:
    return BinaryOp("eq", convert(a), convert(b))


def not_equal(a: Any, b: Any) -> BinaryOp:
    return BinaryOp("ne", convert(a), convert(b))


def logical_and(*conds: Any) -> Expr:
    """``c0 && c1 && ...``; ``true`` when empty."""
    if not conds:
        return const(True)
    out = convert(conds[0])
    for c in conds[1:]:
        out = BinaryOp("and", out, convert(c))
    return out


def logical_or(*conds: Any) -> Expr:
    if not conds:
        return const(False)
    out = convert(conds[0])
    for c in conds[1:]:
        out = BinaryOp("or", out, convert(c))
    return out


def logical_not(a: Any) -> UnaryOp:
    return UnaryOp("not", convert(a))


def minimum(a: Any, b: Any) -> BinaryOp:
    return BinaryOp("min", convert(a), convert(b))


def maximum(a: Any, b: Any) -> BinaryOp:
    return BinaryOp("max", convert(a), convert(b))


def if_then_else(cond: Any, then_expr: Any, else_expr: Any) -> IfThenElse:
    return IfThenElse(convert(cond), convert(then_expr), convert(else_expr))


def cast(expr: Any, dtype: Any) -> Cast:
    if not isinstance(dtype, PointerType):
        dtype = data_type(dtype)
    return Cast(convert(expr), dtype)


def tensor_element_or_slice(base: Expr, indices: Any) -> Expr:
    """``base[...]`` with ints/exprs gives an element; any ``:`` gives a slice."""
    if not isinstance(indices, tuple):
        indices = (indices,)
    if not any(isinstance(i, slice) for i in indices):
        return TensorElement(base, tuple(convert(i) for i in indices))
    fixed, starts, ends = [], [], []
    for i in indices:
        if isinstance(i, slice):
            if i.step not in (None, 1):
                raise ValueError("tensor slices with a step are not supported")
            fixed.append(None)
            starts.append(None if i.start is None else convert(i.start))
            ends.append(None if i.stop is None else convert(i.stop))
        else:
            fixed.append(convert(i))
            starts.append(None)
            ends.append(None)
    return TensorSlice(base, tuple(fixed), tuple(starts), tuple(ends))
