"""Visitors and rewriters over the IR, with one method per node kind.

`IRVisitor.visit(node)` dispatches on the node's class to ``visit_<ClassName>``; the
default methods walk every child. `IRRewriter` returns a new tree and rebuilds a node
only when one of its children changed, so unchanged subtrees are shared (and
``rewritten is original`` tells that nothing changed).
"""
from __future__ import annotations

from typing import Any

import attrs

from hidet_framework.ir.expr import (
    Address, BinaryOp, Call, Cast, Constant, Dereference, Expr, IfThenElse, Node,
    TensorElement, TensorSlice, UnaryOp, Var,
)
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, BreakStmt, BufferStoreStmt, ContinueStmt, DeclareStmt,
    EvaluateStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, WhileStmt,
)


class _Dispatch:
    """Dispatch `visit(node)` to ``visit_<ClassName>``, cached per class.

    Each subclass gets its own table (node class -> method), filled on first use: one
    dict lookup per visit, which is most of a walk's overhead (issue 11 profile)."""

    _visit_table: dict = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._visit_table = {}

    def visit(self, node: Any) -> Any:
        if node is None:
            return None
        method = self._visit_table.get(type(node))
        if method is None:
            method = self._visit_method(type(node))
        return method(self, node)

    @classmethod
    def _visit_method(cls, node_cls: type) -> Any:
        for base in node_cls.__mro__:
            method = getattr(cls, "visit_" + base.__name__, None)
            if method is not None:
                cls._visit_table[node_cls] = method
                return method
        raise TypeError(f"{cls.__name__} cannot visit {node_cls.__name__}")


class IRVisitor(_Dispatch):
    """Walks the tree; override ``visit_<Node>`` methods and call the base to recurse."""

    def visit_seq(self, items: Any) -> None:
        for item in items:
            if item is not None:
                self.visit(item)

    # modules and functions
    def visit_IRModule(self, m: IRModule) -> None:
        for fn in m.functions.values():
            self.visit(fn)

    def visit_Function(self, fn: Function) -> None:
        self.visit(fn.body)

    # expressions
    def visit_Constant(self, e: Constant) -> None:
        pass

    def visit_Var(self, e: Var) -> None:
        pass

    def visit_BinaryOp(self, e: BinaryOp) -> None:
        self.visit(e.a)
        self.visit(e.b)

    def visit_UnaryOp(self, e: UnaryOp) -> None:
        self.visit(e.a)

    def visit_Cast(self, e: Cast) -> None:
        self.visit(e.expr)

    def visit_Call(self, e: Call) -> None:
        self.visit_seq(e.args)

    def visit_TensorElement(self, e: TensorElement) -> None:
        self.visit(e.base)
        self.visit_seq(e.indices)

    def visit_TensorSlice(self, e: TensorSlice) -> None:
        self.visit(e.base)
        self.visit_seq(e.indices)
        self.visit_seq(e.starts)
        self.visit_seq(e.ends)

    def visit_IfThenElse(self, e: IfThenElse) -> None:
        self.visit(e.cond)
        self.visit(e.then_expr)
        self.visit(e.else_expr)

    def visit_Address(self, e: Address) -> None:
        self.visit(e.expr)

    def visit_Dereference(self, e: Dereference) -> None:
        self.visit(e.ptr)

    # statements
    def visit_DeclareStmt(self, s: DeclareStmt) -> None:
        self.visit(s.var)
        self.visit(s.init)

    def visit_BufferStoreStmt(self, s: BufferStoreStmt) -> None:
        self.visit(s.base)
        self.visit_seq(s.indices)
        self.visit(s.value)

    def visit_AssignStmt(self, s: AssignStmt) -> None:
        self.visit(s.var)
        self.visit(s.value)

    def visit_LetStmt(self, s: LetStmt) -> None:
        self.visit(s.var)
        self.visit(s.value)
        self.visit(s.body)

    def visit_ForStmt(self, s: ForStmt) -> None:
        self.visit(s.var)
        self.visit(s.extent)
        self.visit(s.body)

    def visit_ForMappingStmt(self, s: ForMappingStmt) -> None:
        self.visit_seq(s.vars)
        self.visit(s.worker)
        self.visit(s.body)

    def visit_WhileStmt(self, s: WhileStmt) -> None:
        self.visit(s.cond)
        self.visit(s.body)

    def visit_BreakStmt(self, s: BreakStmt) -> None:
        pass

    def visit_ContinueStmt(self, s: ContinueStmt) -> None:
        pass

    def visit_IfStmt(self, s: IfStmt) -> None:
        self.visit(s.cond)
        self.visit(s.then_body)
        self.visit(s.else_body)

    def visit_SeqStmt(self, s: SeqStmt) -> None:
        self.visit_seq(s.stmts)

    def visit_EvaluateStmt(self, s: EvaluateStmt) -> None:
        self.visit(s.expr)

    def visit_AssertStmt(self, s: AssertStmt) -> None:
        self.visit(s.cond)

    def visit_AsmStmt(self, s: AsmStmt) -> None:
        for _, e in s.outputs:
            self.visit(e)
        for _, e in s.inputs:
            self.visit(e)

    def visit_ReturnStmt(self, s: ReturnStmt) -> None:
        self.visit(s.value)


_INIT_NAMES: dict = {}  # node class -> (attribute name, __init__ name) of each init field


def _evolve(node: Node, changes: dict) -> Node:
    """``attrs.evolve(node, **changes)`` without its per-call field walk: a new node of
    the same class through its ``__init__`` (converters and validators run)."""
    cls = type(node)
    names = _INIT_NAMES.get(cls)
    if names is None:
        names = _INIT_NAMES[cls] = tuple((a.name, a.alias) for a in attrs.fields(cls) if a.init)
    kwargs = {init: changes[init] if init in changes else getattr(node, name) for name, init in names}
    return cls(**kwargs)


class IRRewriter(_Dispatch):
    """Returns a rewritten tree; override ``visit_<Node>`` and return the new node.
    The base methods rebuild a node only when a child changed."""

    def visit_seq(self, items: tuple) -> tuple:
        new = []
        changed = False
        for item in items:
            out = None if item is None else self.visit(item)
            changed = changed or out is not item
            new.append(out)
        return tuple(new) if changed else items

    @staticmethod
    def _rebuild(node: Node, **changes: Any) -> Node:
        for k, v in changes.items():
            if getattr(node, k) is not v:
                return _evolve(node, changes)
        return node

    def visit_IRModule(self, m: IRModule) -> IRModule:
        new = {name: self.visit(fn) for name, fn in m.functions.items()}
        if all(new[k] is m.functions[k] for k in new):
            return m
        return m.with_functions(new)

    def visit_Function(self, fn: Function) -> Function:
        return self._rebuild(fn, body=self.visit(fn.body))

    # expressions
    def visit_Constant(self, e: Constant) -> Expr:
        return e

    def visit_Var(self, e: Var) -> Expr:
        return e

    # The most visited kinds rebuild inline (the rewriters' hot path; same result as `_rebuild`).
    def visit_BinaryOp(self, e: BinaryOp) -> Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        return e if a is e.a and b is e.b else _evolve(e, {"a": a, "b": b})

    def visit_UnaryOp(self, e: UnaryOp) -> Expr:
        a = self.visit(e.a)
        return e if a is e.a else _evolve(e, {"a": a})

    def visit_Cast(self, e: Cast) -> Expr:
        expr = self.visit(e.expr)
        return e if expr is e.expr else _evolve(e, {"expr": expr})

    def visit_Call(self, e: Call) -> Expr:
        return self._rebuild(e, args=self.visit_seq(e.args))

    def visit_TensorElement(self, e: TensorElement) -> Expr:
        return self._rebuild(e, base=self.visit(e.base), indices=self.visit_seq(e.indices))

    def visit_TensorSlice(self, e: TensorSlice) -> Expr:
        return self._rebuild(e, base=self.visit(e.base), indices=self.visit_seq(e.indices),
                             starts=self.visit_seq(e.starts), ends=self.visit_seq(e.ends))

    def visit_IfThenElse(self, e: IfThenElse) -> Expr:
        return self._rebuild(e, cond=self.visit(e.cond), then_expr=self.visit(e.then_expr),
                             else_expr=self.visit(e.else_expr))

    def visit_Address(self, e: Address) -> Expr:
        return self._rebuild(e, expr=self.visit(e.expr))

    def visit_Dereference(self, e: Dereference) -> Expr:
        return self._rebuild(e, ptr=self.visit(e.ptr))

    # statements
    def visit_DeclareStmt(self, s: DeclareStmt):
        return self._rebuild(s, var=self.visit(s.var), init=self.visit(s.init))

    def visit_BufferStoreStmt(self, s: BufferStoreStmt):
        return self._rebuild(s, base=self.visit(s.base), indices=self.visit_seq(s.indices),
                             value=self.visit(s.value))

    def visit_AssignStmt(self, s: AssignStmt):
        return self._rebuild(s, var=self.visit(s.var), value=self.visit(s.value))

    def visit_LetStmt(self, s: LetStmt):
        return self._rebuild(s, var=self.visit(s.var), value=self.visit(s.value), body=self.visit(s.body))

    def visit_ForStmt(self, s: ForStmt):
        return self._rebuild(s, var=self.visit(s.var), extent=self.visit(s.extent), body=self.visit(s.body))

    def visit_ForMappingStmt(self, s: ForMappingStmt):
        return self._rebuild(s, vars=self.visit_seq(s.vars), worker=self.visit(s.worker),
                             body=self.visit(s.body))

    def visit_WhileStmt(self, s: WhileStmt):
        return self._rebuild(s, cond=self.visit(s.cond), body=self.visit(s.body))

    def visit_BreakStmt(self, s: BreakStmt):
        return s

    def visit_ContinueStmt(self, s: ContinueStmt):
        return s

    def visit_IfStmt(self, s: IfStmt):
        return self._rebuild(s, cond=self.visit(s.cond), then_body=self.visit(s.then_body),
                             else_body=self.visit(s.else_body))

    def visit_SeqStmt(self, s: SeqStmt):
        return self._rebuild(s, stmts=self.visit_seq(s.stmts))

    def visit_EvaluateStmt(self, s: EvaluateStmt):
        return self._rebuild(s, expr=self.visit(s.expr))

    def visit_AssertStmt(self, s: AssertStmt):
        return self._rebuild(s, cond=self.visit(s.cond))

    def visit_AsmStmt(self, s: AsmStmt):
        outputs = tuple((c, self.visit(e)) for c, e in s.outputs)
        inputs = tuple((c, self.visit(e)) for c, e in s.inputs)
        same = all(a[1] is b[1] for a, b in zip(outputs + inputs, s.outputs + s.inputs))
        return s if same else attrs.evolve(s, outputs=outputs, inputs=inputs)

    def visit_ReturnStmt(self, s: ReturnStmt):
        return self._rebuild(s, value=self.visit(s.value))


class VarSubstituter(IRRewriter):
    """Replaces the variables that are keys of `mapping` by their values."""

    def __init__(self, mapping: dict) -> None:
        self.mapping = mapping

    def visit_Var(self, e: Var) -> Expr:
        return self.mapping.get(e, e)


def substitute(node: Any, mapping: dict) -> Any:
    """Replace variables (keys of `mapping`) by expressions everywhere in `node`."""
    return VarSubstituter(mapping).visit(node) if mapping else node


class _Collect(IRVisitor):
    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.found: list = []
        self.seen: set[int] = set()

    def visit(self, node: Any) -> Any:
        if isinstance(node, self.cls) and id(node) not in self.seen:
            self.seen.add(id(node))
            self.found.append(node)
        return super().visit(node)


def collect(node: Any, cls: type) -> list:
    """All distinct nodes of class `cls` in `node`, in visiting order."""
    c = _Collect(cls)
    c.visit(node)
    return c.found
