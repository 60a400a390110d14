"""Loops of a script function: ``range``, ``grid``, ``parallel``, ``unroll``,
``mapping.on(worker)``, ``while``, and loops unrolled while tracing.

A mixin of `StmtTracer` (it uses that class's blocks, scopes and errors); kept apart
so each file reads on its own.
"""
from __future__ import annotations

import ast
from typing import Any

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Var, const, convert
from hidet_framework.ir.stmt import BreakStmt, ContinueStmt, ForMappingStmt, ForStmt, Stmt, WhileStmt
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.lang.constructs import LoopNest, script_range
from hidet_framework.lang.expr_tracer import is_ir


class LoopStatements:
    """``stmt_For``, ``stmt_While``, ``stmt_Break``, ``stmt_Continue``."""

    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(node, "`for ... else` is not allowed in a script function")
        it = self._eval_iterable(node.iter)
        if isinstance(it, LoopNest):
            self._emit_loop_nest(node, it)
        elif hasattr(it, "mapping") and hasattr(it, "worker"):
            self._emit_mapping_loop(node, it)
        elif not is_ir(it) and hasattr(it, "__iter__") and not isinstance(it, (str, dict)):
            self._unroll_static(node, list(it))
        else:
            raise self.error(node.iter, f"cannot loop over {it!r}; use range(), grid(), parallel(), unroll(), "
                                        "mapping.on(worker) or static_range()")

    def _eval_iterable(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Call) and self.eval(node.func) is range:
            args = self._elements(node.args)
            if node.keywords:
                raise self.error(node, "range() takes no keyword arguments")
            try:
                return script_range(*args)
            except (TypeError, ValueError) as exc:
                raise self.error(node, str(exc)) from exc
        return self.eval(node)

    def _target_names(self, target: ast.AST, count: int, node: ast.AST) -> list:
        elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        if not all(isinstance(e, ast.Name) for e in elts):
            raise self.error(node, "loop targets must be plain names")
        if len(elts) != count:
            raise self.error(node, f"this loop has {count} index(es) but {len(elts)} name(s) are given")
        return [e.id for e in elts]

    def _emit_loop_nest(self, node: ast.For, nest: LoopNest) -> None:
        names = self._target_names(node.target, len(nest.extents), node)
        loop_vars = [Var(n, _index_type(e)) for n, e in zip(names, nest.extents)]
        bindings = []
        for name, v, start, step in zip(names, loop_vars, nest.starts, nest.steps):
            value: Any = v
            if not (isinstance(step, int) and step == 1):
                value = value * step
            if not (isinstance(start, int) and start == 0):
                value = start + value
            bindings.append((name, value, "loop", node))
        self.loops.append("ir")
        body = self.trace_block(node.body, tuple(bindings))
        self.loops.pop()
        for v, extent in reversed(list(zip(loop_vars, nest.extents))):
            body = ForStmt(v, extent, body, unroll=nest.unroll, parallel=nest.parallel)
        self.emit(body)

    def _emit_mapping_loop(self, node: ast.For, on: Any) -> None:
        mapping = on.mapping
        names = self._target_names(node.target, len(mapping.task_shape), node)
        loop_vars = [Var(n, dtypes.int32) for n in names]
        self.loops.append("ir")
        body = self.trace_block(node.body, tuple((n, v, "loop", node) for n, v in zip(names, loop_vars)))
        self.loops.pop()
        self.emit(ForMappingStmt(tuple(loop_vars), mapping, on.worker, body))

    def _unroll_static(self, node: ast.For, values: list) -> None:
        # Trace-time unrolling: the body is traced once per value, inline, with the
        # loop name bound to that host value (an int for static_range).
        self.loops.append("static")
        try:
            for value in values:
                self.assign_static_target(node.target, value, node)
                for s in node.body:
                    self.trace_stmt(s)
        finally:
            self.loops.pop()

    def assign_static_target(self, target: ast.AST, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value, "host" if not is_ir(value) else "alias", node)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (tuple, list)) \
                and len(value) == len(target.elts):
            for t, v in zip(target.elts, value):
                self.assign_static_target(t, v, node)
        else:
            raise self.error(node, f"cannot unpack {value!r} into the loop target {ast.unparse(target)}")

    def stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.error(node, "`while ... else` is not allowed in a script function")
        cond = self.eval(node.test)
        self.loops.append("ir")
        body = self.trace_block(node.body)
        self.loops.pop()
        self.emit(WhileStmt(convert(cond) if is_ir(cond) else const(bool(cond)), body))

    def _loop_jump(self, node: ast.AST, stmt: Stmt, word: str) -> None:
        if not self.loops:
            raise self.error(node, f"`{word}` outside a loop")
        if self.loops[-1] == "static":
            raise self.error(node, f"`{word}` in a loop unrolled at trace time (static_range or a host sequence)")
        self.emit(stmt)

    def stmt_Break(self, node: ast.Break) -> None:
        self._loop_jump(node, BreakStmt(), "break")

    def stmt_Continue(self, node: ast.Continue) -> None:
        self._loop_jump(node, ContinueStmt(), "continue")


def _index_type(extent: Any) -> DataType:
    """Loop indices are int32 unless the extent is a wider integer expression."""
    if is_ir(extent):
        t = infer_type(extent)
        if isinstance(t, DataType) and t.is_integer() and t.bits > 32:
            return t
    return dtypes.int32
