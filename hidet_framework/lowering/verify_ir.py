"""An IR well-formedness verifier, run by the `VerifyAfter` instrument after each pass.

Checks, per function:
  * every variable used is a parameter, or defined by an enclosing declare / let / for /
    for-mapping (a declaration is visible to the statements after it in its block);
  * no variable is defined again while it is in scope (an unrolled body that reuses a
    declaration would declare one C variable twice);
  * loop and let variables are never assigned;
  * after flattening, every access to a tensor-typed variable has exactly one index.
"""
from __future__ import annotations

from typing import Any, Optional

from hidet_framework.ir.expr import TensorElement, Var
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.functors import IRVisitor
from hidet_framework.ir.printer import format_ir
from hidet_framework.ir.stmt import (
    AssignStmt, BufferStoreStmt, DeclareStmt, ForMappingStmt, ForStmt, LetStmt, SeqStmt,
)
from hidet_framework.ir.types import TensorType


class IRVerificationError(AssertionError):
    """The IR is malformed; `pass_name` is the pass after which it was found."""

    def __init__(self, message: str, pass_name: Optional[str] = None) -> None:
        where = f"after pass {pass_name!r}: " if pass_name else ""
        super().__init__(where + message)
        self.pass_name = pass_name


class _Verifier(IRVisitor):
    def __init__(self, fn: Function, flattened: bool) -> None:
        self.fn = fn
        self.flattened = flattened
        self.scopes: list[set[Var]] = [set(fn.params)]
        self.readonly: set[Var] = set()  # loop and let variables

    def fail(self, message: str) -> None:
        raise IRVerificationError(f"function {self.fn.name!r}: {message}")

    def in_scope(self, v: Var) -> bool:
        return any(v in scope for scope in self.scopes)

    def define(self, v: Var, what: str) -> None:
        if self.in_scope(v):
            self.fail(f"{what} {format_ir(v)!r} defines a variable that is already defined in scope")
        self.scopes[-1].add(v)

    def in_block(self, body: Any, *defined: tuple[Var, str], readonly: bool = False) -> None:
        self.scopes.append(set())
        for v, what in defined:
            self.define(v, what)
            if readonly:
                self.readonly.add(v)
        self.visit(body)
        self.scopes.pop()

    # definitions
    def visit_Function(self, fn: Function) -> None:
        self.in_block(fn.body)

    def visit_SeqStmt(self, s: SeqStmt) -> None:
        self.scopes.append(set())  # declarations live until the end of their block
        self.visit_seq(s.stmts)
        self.scopes.pop()

    def visit_DeclareStmt(self, s: DeclareStmt) -> None:
        self.visit(s.init)
        if isinstance(s.var.type, TensorType):
            for extent in s.var.type.shape:
                if isinstance(extent, Var):
                    self.visit(extent)
        self.define(s.var, "declare")

    def visit_LetStmt(self, s: LetStmt) -> None:
        self.visit(s.value)
        self.in_block(s.body, (s.var, "let"), readonly=True)

    def visit_ForStmt(self, s: ForStmt) -> None:
        self.visit(s.extent)
        self.in_block(s.body, (s.var, "for"), readonly=True)

    def visit_ForMappingStmt(self, s: ForMappingStmt) -> None:
        self.visit(s.worker)
        self.in_block(s.body, *[(v, "for-mapping") for v in s.vars], readonly=True)

    # uses
    def visit_Var(self, v: Var) -> None:
        if not self.in_scope(v):
            self.fail(f"variable {format_ir(v)!r} is used where it is not defined")

    def visit_AssignStmt(self, s: AssignStmt) -> None:
        if s.var in self.readonly:
            self.fail(f"loop/let variable {format_ir(s.var)!r} is assigned")
        super().visit_AssignStmt(s)

    def visit_TensorElement(self, e: TensorElement) -> None:
        self.check_flat(e.base, e.indices, e)
        super().visit_TensorElement(e)

    def visit_BufferStoreStmt(self, s: BufferStoreStmt) -> None:
        self.check_flat(s.base, s.indices, s)
        super().visit_BufferStoreStmt(s)

    def check_flat(self, base: Any, indices: tuple, node: Any) -> None:
        if self.flattened and isinstance(base, Var) and isinstance(base.type, TensorType) and len(indices) != 1:
            self.fail(f"tensor access with {len(indices)} indices after flattening: {format_ir(node)}")


def verify_ir(node: Any, after_pass: Optional[str] = None, flattened: bool = False) -> None:
    """Raise `IRVerificationError` (naming `after_pass`) when a function of `node` (a
    module or a function) is malformed."""
    functions = node.functions.values() if isinstance(node, IRModule) else [node]
    for fn in functions:
        try:
            _Verifier(fn, flattened).visit(fn)
        except IRVerificationError as err:
            raise IRVerificationError(str(err), after_pass) from None
