"""simplify_expr: run the arithmetic simplifier (``simplifier.simplify``) on every expression,
knowing the bounds that enclosing statements give:

  * ``for i in range(n)``: i in [0, max(n) - 1] (the body only runs when n > i >= 0);
  * ``for i, j in m.on(w)``: each variable in [0, task extent) of the mapping;
  * ``let x = e``: x in the bounds of e;
  * ``declare x = e`` of a scalar that nothing writes again (no assignment, no inline
    assembly output, no address taken): x in the bounds of e, as for a let (scripts
    declare every local this way: ``tid = threadIdx.x``, ``r = e % d``).

Statements whose condition becomes constant are resolved: an ``if`` keeps one branch,
an ``assert`` proven true disappears (so bounds checks on provably safe accesses cost
nothing), and a loop of extent 0 disappears.
"""
from __future__ import annotations

import weakref
from typing import Any

from hidet_framework.analysis.bounds import Interval
from hidet_framework.ir.expr import Address, Constant, Var
from hidet_framework.ir.func import Function
from hidet_framework.ir.functors import IRVisitor
from hidet_framework.ir.dtypes import DataType
from hidet_framework.simplifier.simplify import Simplifier
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, DeclareStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, SeqStmt,
)
from hidet_framework.lowering.pass_base import FunctionPass


def _empty() -> SeqStmt:
    return SeqStmt(())


class _WrittenVars(IRVisitor):
    """One walk collecting what three `collect` walks did (a tenth of the lowering's time)."""

    def __init__(self) -> None:
        self.out: set = set()

    def visit_AssignStmt(self, s: AssignStmt) -> None:
        self.out.add(s.var)
        super().visit_AssignStmt(s)

    def visit_AsmStmt(self, s: AsmStmt) -> None:
        self.out.update(e for _, e in s.outputs if isinstance(e, Var))
        super().visit_AsmStmt(s)

    def visit_Address(self, a: Address) -> None:
        if isinstance(a.expr, Var):
            self.out.add(a.expr)
        super().visit_Address(a)


def written_vars(body: Any) -> set:
    """Variables that `body` may write after their declaration: assigned, inline
    assembly outputs, or with their address taken."""
    walker = _WrittenVars()
    walker.visit(body)
    return walker.out


class _SimplifyStmts(Simplifier):
    def __init__(self, written: set) -> None:
        super().__init__()
        self.written = written

    def visit_DeclareStmt(self, s: DeclareStmt) -> Any:
        init = self.visit(s.init) if s.init is not None else None
        if init is not None and s.var not in self.written and isinstance(s.var.type, DataType):
            bound = self.bound(init)
            if bound.is_bounded():
                self.bind(s.var, bound)
        return s if init is s.init else self._rebuild(s, init=init)

    def visit_ForStmt(self, s: ForStmt) -> Any:
        extent = self.visit(s.extent)
        if isinstance(extent, Constant) and extent.value <= 0:
            return _empty()
        hi = self.bound(extent).hi
        if hi != float("inf"):
            self.bind(s.var, Interval(0, max(hi - 1, 0)))
        return self._rebuild(s, extent=extent, body=self.visit(s.body))

    def visit_ForMappingStmt(self, s: ForMappingStmt) -> Any:
        shape = getattr(s.mapping, "task_shape", None)
        if shape is not None and len(shape) == len(s.vars):
            for v, extent in zip(s.vars, shape):
                if isinstance(extent, int):
                    self.bind(v, Interval(0, extent - 1))
        return super().visit_ForMappingStmt(s)

    def visit_LetStmt(self, s: LetStmt) -> Any:
        value = self.visit(s.value)
        bound = self.bound(value)
        if bound.is_bounded():
            self.bind(s.var, bound)
        return self._rebuild(s, value=value, body=self.visit(s.body))

    def visit_IfStmt(self, s: IfStmt) -> Any:
        cond = self.visit(s.cond)
        if isinstance(cond, Constant):
            chosen = s.then_body if cond.value else s.else_body
            return _empty() if chosen is None else self.visit(chosen)
        return self._rebuild(s, cond=cond, then_body=self.visit(s.then_body), else_body=self.visit(s.else_body))

    def visit_AssertStmt(self, s: AssertStmt) -> Any:
        cond = self.visit(s.cond)
        if isinstance(cond, Constant) and cond.value:
            return _empty()
        return self._rebuild(s, cond=cond)

    def visit_SeqStmt(self, s: SeqStmt) -> Any:
        stmts = self.visit_seq(s.stmts)
        if stmts is s.stmts:
            return s
        # drop emptied statements, but never merge blocks: a nested block scopes its declarations
        return SeqStmt(tuple(st for st in stmts if not (isinstance(st, SeqStmt) and not st.stmts)))


# Functions this pass returned, with the written variables it saw: id -> (weak ref, set).
# The pipeline runs the pass twice (after flattening, and after unrolling and bounds
# checks); when nothing changed a function in between, the second run would get back
# what it is given, so it returns it at once (docs/testing.md, "Session 11").
_RESULTS: dict[int, tuple[Any, frozenset]] = {}
_RESULTS_LIMIT = 256


class SimplifyExpr(FunctionPass):
    name = "simplify_expr"

    def run_on_function(self, fn: Function, ctx: Any) -> Function:
        written = frozenset(written_vars(fn.body))
        seen = _RESULTS.get(id(fn))
        if seen is not None and seen[0]() is fn and seen[1] == written:
            # `fn` is this pass's own output, unchanged since, and the same variables are
            # written in it (so the same ones are bound). Simplifying it again would
            # visit the same nodes under the same bounds: each is one on which no rule
            # applied in the run that made it, so the result would be `fn` itself.
            return fn
        simplifier = _SimplifyStmts(written)
        out = simplifier.visit(fn)
        if not simplifier.capped:  # else a node may still rewrite: a second run is not a no-op
            if len(_RESULTS) >= _RESULTS_LIMIT:
                _RESULTS.clear()
            _RESULTS[id(out)] = (weakref.ref(out), written)
        return out
