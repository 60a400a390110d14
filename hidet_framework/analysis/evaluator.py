"""An IR evaluator: the reference semantics of the IR, in pure Python.

It runs small programs, so lowering passes can be property-tested without a C compiler:
a pass is right when the evaluated result is the same before and after it. Slow by
design, for small sizes. The ``visit_<Node>`` methods define the semantics (a tree
walker); evaluation runs each node as a closure built once from them
(``evaluator_closures``, tested bit for bit against the walker).

Semantics fixed here (and followed by the C-style backends): integer division and
modulo truncate toward zero like C; integer results wrap to their type's width;
floating-point values are numpy scalars of their type, with IEEE results and no warnings
(inf - inf is NaN, as in the generated C: numpy's RuntimeWarnings are off while a
function runs); a ``for``-mapping runs its body
for ``mapping.worker2task(worker)`` in order (nothing for a worker beyond the mapping's
worker count, like the lowered guard); tensors declared in a function start
poisoned (NaN for floats, a fixed odd pattern for integers) so a read before a write
shows.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import (
    Address, BinaryOp, Call, Cast, Constant, Dereference, Expr, IfThenElse, TensorElement,
    TensorSlice, UnaryOp, Var, const,
)
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.functors import _Dispatch
from hidet_framework.ir.primitives import lookup_primitive
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, BreakStmt, BufferStoreStmt, ContinueStmt, DeclareStmt,
    EvaluateStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, WhileStmt,
)
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import PointerType, TensorType
from hidet_framework.analysis.evaluator_closures import closure
from hidet_framework.analysis.evaluator_values import (  # noqa: F401 (re-exported)
    _BINARY, Buffer, EvaluationError, PointerValue, SliceValue, _Break, _c_div, _c_mod,
    _CONSTANTS, _CONSTANTS_LIMIT, _Continue, _Return, _scalar, _wrap_int,
)
from hidet_framework.mapping.layout import layout_of


class Evaluator(_Dispatch):
    """Runs IR. `primitives` overrides the value/implementation of primitive calls by
    name (e.g. ``{"threadIdx_x": lambda: 3}``)."""

    def __init__(self, module: IRModule | None = None, primitives: Mapping[str, Callable] | None = None) -> None:
        self.module = module
        self.primitives = dict(primitives or {})
        self.env: dict[Var, Any] = {}

    # ---------------------------------------------------------------- functions
    def call_function(self, fn: Function, args: list[Any]) -> Any:
        if len(args) != len(fn.params):
            raise EvaluationError(f"{fn.name} takes {len(fn.params)} arguments, got {len(args)}")
        saved = self.env
        self.env = {}
        for p, a in zip(fn.params, args):
            self.env[p] = self._bind_param(p, a)
        try:
            with np.errstate(all="ignore"):
                self.exec_stmt(fn.body)
            result = None
        except _Return as r:
            result = r.value
        finally:
            self.env = saved
        return result

    def _bind_param(self, p: Var, a: Any) -> Any:
        if isinstance(p.type, TensorType):
            if isinstance(a, (Buffer, SliceValue)):
                return a
            return Buffer(np.asarray(a).reshape(-1), p.type)
        if isinstance(p.type, PointerType):
            return a if isinstance(a, Buffer) else Buffer(np.asarray(a).reshape(-1), None)
        return _scalar(a, p.type)

    # --------------------------------------------------------------- statements
    def exec_stmt(self, s: Any) -> None:
        closure(s)(self)

    def visit_SeqStmt(self, s: SeqStmt) -> None:
        for st in s.stmts:
            self.visit(st)

    def visit_DeclareStmt(self, s: DeclareStmt) -> None:
        t = s.var.type
        if isinstance(t, TensorType) and s.init is not None:
            # a tensor view over a pointer (tensor_pointer): alias the pointed-to memory
            target = self.eval_expr(s.init)
            if not isinstance(target, Buffer):
                raise EvaluationError(f"a tensor view must be initialised from a pointer, got {target!r}")
            start = target.base if isinstance(target, PointerValue) else 0
            self.env[s.var] = Buffer(target.flat[start:], t)
        elif isinstance(t, TensorType):
            size = int(self.eval_expr(_as_expr(layout_of(t).size)))
            np_dtype = np.dtype("float32" if t.dtype.name == "bfloat16" else t.dtype.numpy_name)
            flat = np.empty(size, dtype=np_dtype)
            flat.fill(np.nan if np_dtype.kind == "f" else 0x5A)
            self.env[s.var] = Buffer(flat, t)
        else:
            self.env[s.var] = None if s.init is None else self.eval_typed(s.init, t)

    def visit_AssignStmt(self, s: AssignStmt) -> None:
        if s.var not in self.env:
            raise EvaluationError(f"assignment to undeclared variable {s.var.hint}")
        self.env[s.var] = self.eval_typed(s.value, s.var.type)

    def visit_BufferStoreStmt(self, s: BufferStoreStmt) -> None:
        target, flat_index = self._locate(s.base, s.indices)
        value = self.eval_expr(s.value)
        target.flat[flat_index] = value

    def visit_LetStmt(self, s: LetStmt) -> None:
        self.env[s.var] = self.eval_typed(s.value, s.var.type)
        self.exec_stmt(s.body)

    def visit_ForStmt(self, s: ForStmt) -> None:
        for i in range(int(self.eval_expr(s.extent))):
            self.env[s.var] = i
            if not self._loop_iteration(s.body):
                break

    def visit_ForMappingStmt(self, s: ForMappingStmt) -> None:
        worker = int(self.eval_expr(s.worker))
        if worker >= s.mapping.num_workers:
            return  # more workers than the mapping has: the extra ones run no task
        for task in s.mapping.worker2task(worker):
            for v, i in zip(s.vars, task):
                self.env[v] = int(i)
            self.exec_stmt(s.body)

    def visit_WhileStmt(self, s: WhileStmt) -> None:
        while self.eval_expr(s.cond):
            if not self._loop_iteration(s.body):
                break

    def _loop_iteration(self, body: Any) -> bool:
        """Run one iteration of a loop body; False when it breaks out of the loop."""
        try:
            self.exec_stmt(body)
        except _Break:
            return False
        except _Continue:
            pass
        return True

    def visit_BreakStmt(self, s: BreakStmt) -> None:
        raise _Break()

    def visit_ContinueStmt(self, s: ContinueStmt) -> None:
        raise _Continue()

    def visit_IfStmt(self, s: IfStmt) -> None:
        if self.eval_expr(s.cond):
            self.exec_stmt(s.then_body)
        else:
            self.exec_stmt(s.else_body)

    def visit_EvaluateStmt(self, s: EvaluateStmt) -> None:
        self.eval_expr(s.expr)

    def visit_AssertStmt(self, s: AssertStmt) -> None:
        if not self.eval_expr(s.cond):
            raise EvaluationError(f"assertion failed: {s.message or s.cond}")

    def visit_AsmStmt(self, s: AsmStmt) -> None:
        raise EvaluationError("inline assembly cannot be evaluated in Python")

    def visit_ReturnStmt(self, s: ReturnStmt) -> None:
        raise _Return(None if s.value is None else self.eval_expr(s.value))

    # -------------------------------------------------------------- expressions
    def eval_typed(self, e: Expr, t: Any) -> Any:
        value = self.eval_expr(e)
        return _scalar(value, t) if isinstance(t, DataType) else value

    def eval_expr(self, e: Expr) -> Any:
        return closure(e)(self)

    def visit_Constant(self, e: Constant) -> Any:
        value = _CONSTANTS.get(e)
        if value is None:
            if len(_CONSTANTS) >= _CONSTANTS_LIMIT:
                _CONSTANTS.clear()
            value = _CONSTANTS[e] = _scalar(e.value, e.dtype)
        return value

    def visit_Var(self, e: Var) -> Any:
        if e not in self.env:
            raise EvaluationError(f"variable {e.hint!r} is not defined here")
        return self.env[e]

    def visit_BinaryOp(self, e: BinaryOp) -> Any:
        if e.op == "and":
            return bool(self.eval_expr(e.a)) and bool(self.eval_expr(e.b))
        if e.op == "or":
            return bool(self.eval_expr(e.a)) or bool(self.eval_expr(e.b))
        a, b = self.eval_expr(e.a), self.eval_expr(e.b)
        if isinstance(a, PointerValue):  # pointer arithmetic
            return PointerValue(a, a.base + (b if e.op == "add" else -b))
        result = _BINARY[e.op](a, b)
        t = infer_type(e)
        return _scalar(result, t) if isinstance(t, DataType) else result

    def visit_UnaryOp(self, e: UnaryOp) -> Any:
        a = self.eval_expr(e.a)
        if e.op == "not":
            return not a
        t = infer_type(e)
        return _scalar(-a if e.op == "neg" else ~a, t)

    def visit_Cast(self, e: Cast) -> Any:
        value = self.eval_expr(e.expr)
        if isinstance(e.dtype, DataType):
            if e.dtype.is_integer() and not isinstance(value, (int, bool)):
                value = int(np.trunc(value))
            return _scalar(value, e.dtype)
        return value

    def visit_Call(self, e: Call) -> Any:
        args = [self.eval_expr(a) for a in e.args]
        if e.func in self.primitives:
            return self.primitives[e.func](*args)
        prim = lookup_primitive(e.func)
        if prim is not None:
            if prim.evaluate is None:
                raise EvaluationError(f"primitive {e.func!r} has no Python implementation")
            return prim.evaluate(*args)
        if self.module is None or e.func not in self.module.functions:
            raise EvaluationError(f"call to unknown function {e.func!r}")
        return self.call_function(self.module.functions[e.func], args)

    def visit_TensorElement(self, e: TensorElement) -> Any:
        target, flat_index = self._locate(e.base, e.indices)
        return target.flat[flat_index]

    def visit_TensorSlice(self, e: TensorSlice) -> Any:
        base = self.eval_expr(e.base)
        fixed = [None if i is None else int(self.eval_expr(i)) for i in e.indices]
        starts = [0 if s is None else int(self.eval_expr(s)) for s in e.starts]
        return SliceValue(base, fixed, starts)

    def visit_IfThenElse(self, e: IfThenElse) -> Any:
        return self.eval_expr(e.then_expr) if self.eval_expr(e.cond) else self.eval_expr(e.else_expr)

    def visit_Address(self, e: Address) -> Any:
        if not isinstance(e.expr, TensorElement):
            raise EvaluationError("the evaluator takes addresses of tensor elements only")
        target, flat_index = self._locate(e.expr.base, e.expr.indices)
        return PointerValue(target, flat_index)

    def visit_Dereference(self, e: Dereference) -> Any:
        p = self.eval_expr(e.ptr)
        return p.flat[p.base]

    def _locate(self, base_expr: Expr, index_exprs: tuple) -> tuple[Buffer, int]:
        base = self.eval_expr(base_expr)
        indices = [int(self.eval_expr(i)) for i in index_exprs]
        while isinstance(base, SliceValue):
            indices = base.full_indices(indices)
            base = base.base
        if not isinstance(base, Buffer):
            raise EvaluationError(f"{base_expr} is not a tensor or pointer")
        flat_index = base.offset(self, indices)
        if not 0 <= flat_index < base.flat.size:
            raise EvaluationError(f"out-of-bounds access {base_expr}{indices} -> {flat_index} of {base.flat.size}")
        return base, flat_index


def _as_expr(x: Any) -> Expr:
    return x if isinstance(x, Expr) else const(int(x))


class TreeWalkingEvaluator(Evaluator):
    """Every node through its ``visit_<Node>`` method at each evaluation, no closures: the
    reference the closures are tested against, and cheaper for an expression seen once."""

    eval_expr = _Dispatch.visit

    def exec_stmt(self, s: Any) -> None:
        if s is not None:
            self.visit(s)


def evaluate_function(fn: Function, *args: Any, module: IRModule | None = None,
                      primitives: Mapping[str, Callable] | None = None) -> Any:
    """Run `fn` on numpy arrays / Python scalars; tensors are updated in place."""
    return Evaluator(module, primitives).call_function(fn, list(args))


def evaluate_expr(e: Expr, env: Mapping[Var, Any] | None = None) -> Any:
    """The value of an expression with the given variable values (by the tree walker:
    the simplifier folds each constant expression it meets once)."""
    ev = TreeWalkingEvaluator()
    ev.env = dict(env or {})
    with np.errstate(all="ignore"):
        return ev.eval_expr(e)
