"""insert_bounds_check: with config ``bounds_check``, assert before each statement that
every tensor index it uses is in range.

    b[i] = a[i, j + 1]   ->   assert 0 <= i < 4,     "b: index 0 ..."
                              assert 0 <= i < 4,     "a: index 0 ..."
                              assert 0 <= j + 1 < 8, "a: index 1 ..."
                              b[i] = a[i, j + 1]

Only tensor-typed variables are checked (their shape is known; pointers are not).
A flattened access (one index on a tensor of another rank) checks the offset against
the layout's size. An access that runs only under a condition (the branch of an
if-then-else, the right side of ``and`` / ``or``: predicated loads) is checked only
under that condition, so guarded accesses never trip. The asserts that loop bounds
prove are removed by the simplify_expr pass that follows in the pipeline.
A while loop's condition is checked before the loop only.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir.expr import (
    BinaryOp, Expr, IfThenElse, TensorElement, Var, convert, logical_and, logical_not, logical_or,
)
from hidet_framework.ir.func import Function
from hidet_framework.ir.functors import IRRewriter, IRVisitor
from hidet_framework.ir.printer import format_ir
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, BufferStoreStmt, DeclareStmt, EvaluateStmt, ForMappingStmt,
    ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, Stmt, WhileStmt,
)
from hidet_framework.ir.types import TensorType
from hidet_framework.lowering.pass_base import FunctionPass
from hidet_framework.mapping.layout import layout_of


def _access_checks(base: Any, indices: tuple) -> list[tuple[Expr, str]]:
    """(in-range condition, message) per index of one access."""
    if not (isinstance(base, Var) and isinstance(base.type, TensorType)):
        return []
    t, name = base.type, base.hint
    if len(indices) == 1 and t.rank != 1:
        pairs = [("flat offset", indices[0], layout_of(t).size)]
    else:
        pairs = [(f"index {d}", index, extent) for d, (index, extent) in enumerate(zip(indices, t.shape))]
    return [(logical_and(convert(0) <= index, index < convert(extent)),
             f"{name}: {what} = {format_ir(index)} out of range [0, {format_ir(convert(extent))})")
            for what, index, extent in pairs]


class _CollectAccesses(IRVisitor):
    """Tensor accesses of an expression with the conditions under which they run."""

    def __init__(self) -> None:
        self.guards: list[Expr] = []
        self.checks: list[tuple[Expr, str]] = []

    def add(self, base: Any, indices: tuple) -> None:
        for cond, message in _access_checks(base, indices):
            if self.guards:
                cond = logical_or(logical_not(logical_and(*self.guards)), cond)
            self.checks.append((cond, message))

    def guarded(self, guard: Expr, e: Expr) -> None:
        self.guards.append(guard)
        self.visit(e)
        self.guards.pop()

    def visit_TensorElement(self, e: TensorElement) -> None:
        super().visit_TensorElement(e)
        self.add(e.base, e.indices)

    def visit_IfThenElse(self, e: IfThenElse) -> None:
        self.visit(e.cond)
        self.guarded(e.cond, e.then_expr)
        self.guarded(logical_not(e.cond), e.else_expr)

    def visit_BinaryOp(self, e: BinaryOp) -> None:
        if e.op in ("and", "or"):
            self.visit(e.a)
            self.guarded(e.a if e.op == "and" else logical_not(e.a), e.b)
        else:
            super().visit_BinaryOp(e)


def _head_exprs(s: Stmt) -> list[Any]:
    """The expressions a statement evaluates itself (not those of nested bodies)."""
    table = {
        DeclareStmt: lambda: [s.init], AssignStmt: lambda: [s.value], LetStmt: lambda: [s.value],
        ForStmt: lambda: [s.extent], ForMappingStmt: lambda: [s.worker], WhileStmt: lambda: [s.cond],
        IfStmt: lambda: [s.cond], EvaluateStmt: lambda: [s.expr], ReturnStmt: lambda: [s.value],
        BufferStoreStmt: lambda: [*s.indices, s.value],
        AsmStmt: lambda: [e for _, e in s.outputs + s.inputs],
    }
    return table.get(type(s), lambda: [])()


class _Insert(IRRewriter):
    def checked(self, s: Stmt) -> list[Stmt]:
        """The asserts for what `s` itself accesses, then `s` with its bodies checked."""
        rewritten = super().visit(s)
        if isinstance(s, (SeqStmt, AssertStmt)):
            return [rewritten]
        collector = _CollectAccesses()
        for e in _head_exprs(s):
            if e is not None:
                collector.visit(e)
        if isinstance(s, BufferStoreStmt):
            collector.add(s.base, s.indices)
        return [AssertStmt(cond, message) for cond, message in collector.checks] + [rewritten]

    def visit(self, node: Any) -> Any:
        if not isinstance(node, Stmt) or isinstance(node, SeqStmt):
            return super().visit(node)
        out = self.checked(node)
        return out[0] if len(out) == 1 else SeqStmt(tuple(out))

    def visit_SeqStmt(self, s: SeqStmt) -> Any:
        # asserts go into the same block, so a checked declaration stays visible after it
        return SeqStmt(tuple(x for st in s.stmts for x in self.checked(st)))


class InsertBoundsCheck(FunctionPass):
    name = "insert_bounds_check"

    def run_on_function(self, fn: Function, ctx: Any) -> Function:
        if not ctx.config.get("bounds_check", False):
            return fn
        return _Insert().visit(fn)
