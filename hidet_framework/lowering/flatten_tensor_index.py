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

from hidet_framework.ir.expr import Constant, Expr, TensorElement, Var
from hidet_framework.ir.func import Function
from hidet_framework.ir.functors import IRRewriter, IRVisitor
from hidet_framework.ir.shapes import VISIT, token
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
    """Expressions are memoised by identity and by shape (`ir.shapes`: a node's result
    depends only on its rewritten children), so equal index expressions become one
    object and each distinct access's offset is built once: most accesses of an
    unrolled kernel repeat one already seen (issue 11), and the simplifier, next, meets
    them as one object too."""

    def __init__(self, retyped: dict[Var, Var]) -> None:
        self.retyped = retyped  # rank-1 tensors with a non-identity layout -> flat arrays
        self._memo: dict[int, tuple] = {}  # id -> (node kept alive, result)
        self._shapes: dict[tuple, tuple] = {}  # shape key -> (node with rewritten children, result)
        self._flats: dict[tuple, tuple] = {}  # (base, index tokens) -> (indices kept alive, flat result)
        self.changed = bool(retyped)  # an access flattened or a tensor retyped, not only equal nodes shared

    def visit(self, node: Any) -> Any:
        cls = type(node)
        if cls is Var:
            return self.retyped.get(node, node)
        if cls is Constant or not isinstance(node, Expr):
            return node if cls is Constant else super().visit(node)
        hit = self._memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        children = VISIT.get(cls)  # every kind by its shape, TensorElement included (flattened below)
        if children is None:
            result = super().visit(node)
        else:
            done, key = children(self, node)
            shape = self._shapes.get(key)
            if shape is None:
                result = done
                if cls is TensorElement:
                    base, indices = self.flat(done.base, done.indices)
                    result = self._rebuild(done, base=base, indices=indices)
                self._shapes[key] = (done, result)
            else:
                result = shape[1]
        self._memo[id(node)] = (node, result)
        return result

    def flat(self, base: Expr, indices: tuple) -> tuple[Expr, tuple]:
        key = (id(base), tuple(token(i) for i in indices))
        hit = self._flats.get(key)
        if hit is None:
            out = self._flat(base, indices)
            unchanged = out[0] is base and out[1] is indices
            self.changed = self.changed or not unchanged
            hit = self._flats[key] = ((base, indices), None if unchanged else out)
        # None: an access left as it is, so the caller's own objects (an unchanged tree stays the same object)
        return (base, indices) if hit[1] is None else hit[1]

    def _flat(self, base: Expr, indices: tuple) -> tuple[Expr, tuple]:
        if not (isinstance(base, Var) and isinstance(base.type, TensorType)):
            return base, indices
        t = base.type
        if len(indices) == 1 and t.rank != 1:
            return base, indices  # already an element offset
        if len(indices) != t.rank:
            raise FlattenError(f"{base.hint}: {t} takes {t.rank} indices, got {len(indices)}")
        if t.rank == 1 and base not in self.retyped:
            if not _identity_rank1(t):
                raise FlattenError(f"parameter {base.hint}: a rank-1 tensor with the non-identity "
                                   f"layout {layout_of(t)} cannot be passed flat")
            return base, indices  # the offset is the index: not built (most register-array accesses)
        return self.retyped.get(base, base), (layout_of(t)(*indices),)

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
        flatten = _Flatten(retyped)
        out = flatten.visit(fn)
        return out if flatten.changed else fn  # nothing to flatten: the function itself, not an equal copy
