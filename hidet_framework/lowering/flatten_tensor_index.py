"""flatten_tensor_index: every access to a tensor gets one index, its element offset.

    a: f32[m, n]          a[i, j]       ->  a[i * n + j]          (the layout's offset)
    p: ~f32               p[k]          ->  p[k]                  (pointers already flat)

The offset is the tensor type's layout applied to the indices
(``mapping.layout.layout_of``), so swizzled or composed layouts lower the same way.
After this pass the C-style backends print ``a[offset]`` and declare tensors as flat
arrays of ``layout.size`` elements.

Meaning of a flattened access (the evaluator follows it): one index on a tensor whose
rank is not 1 is an element offset. A rank-1 tensor's single index goes through its
layout, so a rank-1 tensor whose layout is not the identity (a distributed register
tile) is re-declared here as a plain array of its layout's size.
"""
from __future__ import annotations

import functools
from typing import Any

from hidet_framework.ir.expr import Expr, TensorElement, Var
from hidet_framework.ir.func import Function
from hidet_framework.ir.functors import IRRewriter, IRVisitor
from hidet_framework.simplifier.simplify import same_expr, simplify
from hidet_framework.ir.stmt import BufferStoreStmt, DeclareStmt
from hidet_framework.ir.types import TensorType, tensor_type
from hidet_framework.lowering.pass_base import FunctionPass
from hidet_framework.mapping.layout import layout_of


class FlattenError(ValueError):
    pass


def _identity_rank1(t: TensorType) -> bool:
    return _identity_layout(layout_of(t))


@functools.lru_cache(maxsize=4096)
def _identity_layout(layout: Any) -> bool:
    """Memoised per layout (layouts are values): asked at every rank-1 access."""
    probe = Var("i", "int32")
    return same_expr(simplify(layout(probe)), probe)


class _Flatten(IRRewriter):
    def __init__(self, retyped: dict[Var, Var]) -> None:
        self.retyped = retyped  # rank-1 tensors with a non-identity layout -> flat arrays

    def flat(self, base: Expr, indices: tuple) -> tuple[Expr, tuple]:
        if not (isinstance(base, Var) and isinstance(base.type, TensorType)):
            return base, indices
        t = base.type
        if len(indices) == 1 and t.rank != 1:
            return base, indices  # already an element offset
        if len(indices) != t.rank:
            raise FlattenError(f"{base.hint}: {t} takes {t.rank} indices, got {len(indices)}")
        offset = layout_of(t)(*indices)
        if t.rank == 1 and base not in self.retyped:
            if not _identity_rank1(t):
                raise FlattenError(f"parameter {base.hint}: a rank-1 tensor with the non-identity "
                                   f"layout {layout_of(t)} cannot be passed flat")
            return base, indices
        return self.retyped.get(base, base), (offset,)

    def visit_TensorElement(self, e: TensorElement) -> Expr:
        base, indices = self.flat(self.visit(e.base), self.visit_seq(e.indices))
        return self._rebuild(e, base=base, indices=indices)

    def visit_BufferStoreStmt(self, s: BufferStoreStmt) -> Any:
        base, indices = self.flat(self.visit(s.base), self.visit_seq(s.indices))
        return self._rebuild(s, base=base, indices=indices, value=self.visit(s.value))

    def visit_DeclareStmt(self, s: DeclareStmt) -> Any:
        return self._rebuild(s, var=self.retyped.get(s.var, s.var), init=self.visit(s.init))

    def visit_Var(self, e: Var) -> Expr:
        return self.retyped.get(e, e)


class _Declarations(IRVisitor):
    """``collect(body, DeclareStmt)`` without entering expressions (they hold no
    statements, and are most of a kernel's nodes)."""

    def __init__(self) -> None:
        self.found: dict[int, DeclareStmt] = {}  # by id, in visiting order, each once

    def visit(self, node: Any) -> Any:
        if not isinstance(node, Expr):
            super().visit(node)

    def visit_DeclareStmt(self, s: DeclareStmt) -> None:
        self.found.setdefault(id(s), s)


def _declarations(body: Any) -> list:
    walker = _Declarations()
    walker.visit(body)
    return list(walker.found.values())


class FlattenTensorIndex(FunctionPass):
    name = "flatten_tensor_index"

    def run_on_function(self, fn: Function, ctx: Any) -> Function:
        retyped = {}
        for decl in _declarations(fn.body):
            t = decl.var.type
            if isinstance(t, TensorType) and t.rank == 1 and not _identity_rank1(t):
                retyped[decl.var] = Var(decl.var.hint, tensor_type(t.dtype, (layout_of(t).size,)))
        return _Flatten(retyped).visit(fn)
