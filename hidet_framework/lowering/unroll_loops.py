"""unroll_loops: expand loops marked for unrolling whose extent is a constant.

    for i in range(3):  # unroll          a[0] = 0
        a[i] = i                     ->   a[1] = 1
                                          a[2] = 2

``unroll=True`` expands fully; ``unroll=f`` (an int) makes f copies per iteration of a
loop over ``extent // f``, followed by the ``extent % f`` remaining copies. Each copy
gets fresh variables for everything its body defines (declarations, lets, inner
loops), since the copies share one block. A loop whose extent is not a constant keeps
its hint for the backend (``#pragma unroll``); so does a body with break/continue,
whose meaning unrolling would change. Config: ``unroll`` (False disables the pass),
``max_unroll`` (never more copies of one body than this) and ``max_unroll_statements``
(never more statements than this from one loop: copies times the statements of its
body, inner unrolled loops counted expanded). The statement budget is what keeps the
generated code's size independent of the shape: a repeat loop whose extent comes from
a tensor's size stays a loop once its copies would pass the budget.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir.expr import Constant, Var, const
from hidet_framework.ir.func import Function
from hidet_framework.ir.functors import IRRewriter, collect, substitute
from hidet_framework.ir.stmt import (
    BreakStmt, ContinueStmt, DeclareStmt, ForMappingStmt, ForStmt, LetStmt, SeqStmt, Stmt,
)
from hidet_framework.lowering.pass_base import FunctionPass


def defined_vars(body: Stmt) -> list[Var]:
    """Variables that statements inside `body` define."""
    found: list[Var] = []
    for s in collect(body, (DeclareStmt, LetStmt, ForStmt)):
        found.append(s.var)
    for s in collect(body, ForMappingStmt):
        found.extend(s.vars)
    return found


def body_copy(loop: ForStmt, index: Any, body: Stmt) -> Stmt:
    """`body` with the loop variable replaced by `index` and every variable it defines
    replaced by a fresh one."""
    mapping: dict[Var, Any] = {v: Var(v.hint, v.type) for v in defined_vars(body)}
    mapping[loop.var] = index
    return substitute(body, mapping)


class _Unroll(IRRewriter):
    def __init__(self, max_unroll: int, max_statements: int) -> None:
        self.max_unroll = max_unroll
        self.max_statements = max_statements

    def visit_ForStmt(self, s: ForStmt) -> Any:
        s = super().visit_ForStmt(s)  # inner loops first
        if s.unroll in (None, False) or not isinstance(s.extent, Constant):
            return s
        if collect(s.body, (BreakStmt, ContinueStmt)):
            return s
        extent = int(s.extent.value)
        factor = extent if s.unroll is True else int(s.unroll)
        if factor <= 1 or factor > self.max_unroll:
            return s
        if min(factor, extent) * len(collect(s.body, Stmt)) > self.max_statements:
            return ForStmt(s.var, s.extent, s.body, unroll=None, parallel=s.parallel)
        t = s.var.type
        if factor >= extent:
            return SeqStmt(tuple(body_copy(s, const(k, t), s.body) for k in range(extent)))
        outer = Var(s.var.hint + "_o", t)
        copies = tuple(body_copy(s, outer * factor + k, s.body) for k in range(factor))
        main = ForStmt(outer, extent // factor, SeqStmt(copies))
        start = extent - extent % factor
        rest = tuple(body_copy(s, const(start + k, t), s.body) for k in range(extent % factor))
        return SeqStmt((main,) + rest) if rest else main


class UnrollLoops(FunctionPass):
    name = "unroll_loops"

    def run_on_function(self, fn: Function, ctx: Any) -> Function:
        if not ctx.config.get("unroll", True):
            return fn
        return _Unroll(int(ctx.config.get("max_unroll", 1024)),
                       int(ctx.config.get("max_unroll_statements", 4096))).visit(fn)
