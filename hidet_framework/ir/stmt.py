"""Statements of the IR."""
from __future__ import annotations

from typing import Any, Optional

import attrs

from hidet_framework.ir.expr import Expr, Node, Var, convert, convert_all
from hidet_framework.ir.types import Scope


class Stmt(Node):
    """Base of statements."""

    __slots__ = ()


@attrs.frozen(slots=True, eq=False, repr=False)
class DeclareStmt(Stmt):
    """Declare `var` (scalar, pointer or tensor) in `scope`, optionally initialised.
    A tensor-typed variable declared here is an array of its layout's size."""

    var: Var
    init: Optional[Expr] = None
    scope: Scope = Scope.LOCAL


@attrs.frozen(slots=True, eq=False, repr=False)
class BufferStoreStmt(Stmt):
    """``base[indices] = value`` for a tensor or pointer `base`."""

    base: Expr
    indices: tuple = attrs.field(converter=lambda xs: convert_all(xs))
    value: Expr = attrs.field(converter=convert)


@attrs.frozen(slots=True, eq=False, repr=False)
class AssignStmt(Stmt):
    """``var = value`` for a scalar variable declared before."""

    var: Var
    value: Expr = attrs.field(converter=convert)


@attrs.frozen(slots=True, eq=False, repr=False)
class LetStmt(Stmt):
    """Bind `var` to `value` (evaluated once) within `body`."""

    var: Var
    value: Expr = attrs.field(converter=convert)
    body: Stmt = None


@attrs.frozen(slots=True, eq=False, repr=False)
class ForStmt(Stmt):
    """``for var in range(extent)``.

    :param unroll: ``None`` (no hint), ``True`` (unroll fully) or an int factor.
    :param parallel: run iterations on parallel workers (OpenMP threads on CPU):
        True (contiguous static shares) or "dynamic" (handed out one at a time).
    """

    var: Var
    extent: Expr = attrs.field(converter=convert)
    body: Stmt = None
    unroll: Any = None
    parallel: bool = False


@attrs.frozen(slots=True, eq=False, repr=False)
class ForMappingStmt(Stmt):
    """``for vars in mapping.on(worker)``: run `body` for each task the task mapping
    assigns to `worker`, in the mapping's order. Lowered to loops and index arithmetic
    by ``lowering.lower_task_mapping``.

    :param vars: one loop variable per task dimension.
    :param mapping: a ``hidet_framework.mapping.task_mapping.TaskMapping``.
    :param worker: the worker index expression (e.g. ``threadIdx.x``).
    """

    vars: tuple = attrs.field(converter=tuple)
    mapping: Any = None
    worker: Expr = attrs.field(default=None, converter=attrs.converters.optional(convert))
    body: Stmt = None


@attrs.frozen(slots=True, eq=False, repr=False)
class WhileStmt(Stmt):
    cond: Expr
    body: Stmt


@attrs.frozen(slots=True, eq=False, repr=False)
class BreakStmt(Stmt):
    pass


@attrs.frozen(slots=True, eq=False, repr=False)
class ContinueStmt(Stmt):
    pass


@attrs.frozen(slots=True, eq=False, repr=False)
class IfStmt(Stmt):
    cond: Expr = attrs.field(converter=convert)
    then_body: Stmt = None
    else_body: Optional[Stmt] = None


@attrs.frozen(slots=True, eq=False, repr=False)
class SeqStmt(Stmt):
    """Statements in order."""

    stmts: tuple = attrs.field(converter=tuple)


@attrs.frozen(slots=True, eq=False, repr=False)
class EvaluateStmt(Stmt):
    """Evaluate `expr` for its effect (e.g. a call)."""

    expr: Expr


@attrs.frozen(slots=True, eq=False, repr=False)
class AssertStmt(Stmt):
    """Stop with `message` when `cond` is false (checked at run time)."""

    cond: Expr = attrs.field(converter=convert)
    message: str = ""


@attrs.frozen(slots=True, eq=False, repr=False)
class AsmStmt(Stmt):
    """Inline assembly (PTX on CUDA): ``asm volatile(template : outputs : inputs)``.

    :param template: the assembly text with ``%0``-style operand references.
    :param outputs: ``(constraint, expr)`` pairs, constraint like ``"=r"`` / ``"+f"``;
        `expr` is an lvalue (variable or tensor element).
    :param inputs: ``(constraint, expr)`` pairs.
    :param volatile: keep the compiler from moving or removing it.
    :param clobbers: e.g. ``("memory",)``.
    """

    template: str
    outputs: tuple = ()
    inputs: tuple = ()
    volatile: bool = True
    clobbers: tuple = ()


@attrs.frozen(slots=True, eq=False, repr=False)
class ReturnStmt(Stmt):
    value: Optional[Expr] = None


def seq(*stmts: Any) -> Stmt:
    """A `SeqStmt` of the given statements, nested sequences flattened; a single
    statement is returned as is."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, (list, tuple)):
            s = seq(*s)
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))
