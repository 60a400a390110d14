"""`is_pure` per subtree, memoised (issue 11: lowering spends most of its time in the
simplifier). The simplifier asks whether a node is pure of every node it may drop or
replace by a constant; with one walk of the subtree per question, the same subtrees
were walked again and again. Purity does not depend on bounds, so a simplifier keeps
one `Purity` for its whole run. Entries keep their nodes alive, so an id is never
reused while remembered.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir.expr import Call, Constant, Expr, Var
from hidet_framework.ir.functors import IRVisitor
from hidet_framework.ir.primitives import lookup_primitive


def pure_call(c: Call) -> bool:
    """A call without effects: a primitive that declares bounds (it only reads state,
    such as a thread index)."""
    prim = lookup_primitive(c.func)
    return prim is not None and prim.bounds is not None


class Purity(IRVisitor):
    """`is_pure` memoised per subtree: a node is pure when it is not an effectful call
    and all its children are pure."""

    def __init__(self) -> None:
        self.memo: dict[int, tuple[Expr, bool]] = {}  # id -> (node kept alive, pure)
        self.impure = False

    def check(self, e: Expr) -> bool:
        self.impure = False
        self.visit(e)
        return not self.impure

    def visit(self, node: Any) -> None:
        cls = type(node)
        if cls is Constant or cls is Var:
            return
        if not isinstance(node, Expr):
            super().visit(node)
            return
        hit = self.memo.get(id(node))
        if hit is None or hit[0] is not node:
            outer, self.impure = self.impure, isinstance(node, Call) and not pure_call(node)
            super().visit(node)  # a child sets self.impure when it is impure
            hit = self.memo[id(node)] = (node, not self.impure)
            self.impure = outer
        self.impure = self.impure or not hit[1]
