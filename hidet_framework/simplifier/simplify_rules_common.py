"""What the simplifier's rule modules share: the signature of a rule and small
questions about integer expressions (their type, whether they are a constant, whether
a value fits a type), exact equality of trees and purity."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import attrs

from hidet_framework.analysis.bounds import type_range
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Call, Constant, Expr, Node, Var
from hidet_framework.ir.functors import collect
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.simplifier.purity import pure_call

if TYPE_CHECKING:
    from hidet_framework.simplifier.simplify import Simplifier

# A rule gets the simplifier (for `bound` and `may_drop`) and a node whose children are
# already simplified; it returns the rewritten node, or None when it does not apply.
Rule = Callable[["Simplifier", Any], Optional[Expr]]


def int_type(e: Expr) -> Optional[DataType]:
    """The scalar integer type of `e`, or None for any other type."""
    t = infer_type(e)
    return t if type(t) is DataType and t.lanes == 1 and t.kind in _INT_KINDS else None


_INT_KINDS = ("int", "uint")  # DataType.is_integer, inlined: asked millions of times a lowering


def is_const(e: Expr, value: Any = None) -> bool:
    """Whether `e` is a constant (equal to `value`, when one is given)."""
    return isinstance(e, Constant) and (value is None or e.value == value)


def fits(value: int, t: DataType) -> bool:
    """Whether the integer `value` is representable in integer type `t`."""
    full = type_range(t)
    return full.lo <= value <= full.hi


def same_int_type(*exprs: Expr) -> Optional[DataType]:
    """The common integer type when all `exprs` have the same one, else None."""
    common = None
    for e in exprs:  # a loop, not a set: called some 300 thousand times per lowering
        t = int_type(e)
        if t is None or (common is not None and t is not common and t != common):
            return None
        if common is None:
            common = t
    return common


def same_expr(a: Any, b: Any) -> bool:
    """Exact equality of expression trees: variables by identity (unlike structural
    equality, which matches distinct variables one to one)."""
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, Var):
        return False
    if isinstance(a, Constant):
        return a.dtype is b.dtype and a.value == b.value
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_expr(x, y) for x, y in zip(a, b))
    if isinstance(a, Node):
        return all(same_expr(getattr(a, f.name), getattr(b, f.name)) for f in attrs.fields(type(a)))
    return a == b


def is_pure(e: Expr) -> bool:
    """No calls with possible effects (primitives that declare bounds only read state,
    such as thread indices), so the expression may be dropped or duplicated."""
    return all(pure_call(c) for c in collect(e, Call))
