"""An IR evaluator: the reference semantics of the IR, in pure Python.

It runs small programs directly from the tree, so lowering passes can be
property-tested without a C compiler: a pass is right when the evaluated result is the
same before and after it. It is slow by design and meant for small sizes.

Semantics fixed here (and followed by the C-style backends): integer division and
modulo truncate toward zero like C; integer results wrap to their type's width;
floating-point values are numpy scalars of their type; a ``for``-mapping runs its body
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
    TensorSlice, UnaryOp, Var, const, convert,
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
from hidet_framework.mapping.layout import layout_of


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class EvaluationError(RuntimeError):
    pass


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class Buffer:
    """A tensor value: a flat numpy array read through a tensor type's layout."""

    def __init__(self, flat: np.ndarray, ttype: TensorType | None) -> None:
        self.flat = flat
        self.ttype = ttype

    def offset(self, ev: "Evaluator", indices: list[int]) -> int:
        if self.ttype is None:  # a pointer: one flat index
            if len(indices) != 1:
                raise EvaluationError(f"a pointer takes one index, got {len(indices)}")
            return indices[0]
        if len(indices) == 1 and self.ttype.rank != 1:
            return indices[0]  # a flattened access: the element offset (lowering/flatten_tensor_index)
        layout = layout_of(self.ttype)
        layout._check_rank(indices)
        out = layout._offset(tuple(indices))  # what layout(*indices) folds: an int for int shapes
        if type(out) is int and _INT64_MIN <= out <= _INT64_MAX:
            return out  # = evaluating convert(out): an int32 or int64 constant holding it unchanged
        return int(ev.eval_expr(convert(out)))


class PointerValue(Buffer):
    """A pointer into a buffer at an element offset."""

    def __init__(self, target: Buffer, base: int) -> None:
        super().__init__(target.flat, None)
        self.base = base

    def offset(self, ev: "Evaluator", indices: list[int]) -> int:
        return self.base + super().offset(ev, indices)


class SliceValue:
    """A tensor slice: fixed dimensions and start offsets over a base tensor value."""

    def __init__(self, base: Any, fixed: list, starts: list) -> None:
        self.base, self.fixed, self.starts = base, fixed, starts

    def full_indices(self, indices: list[int]) -> list[int]:
        it = iter(indices)
        return [f if f is not None else next(it) + s for f, s in zip(self.fixed, self.starts)]


def _wrap_int(value: int, dtype: DataType) -> int:
    if dtype.kind == "bool":
        return bool(value)
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.kind == "int" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


# Constant node -> its value (nodes are immutable and hash by identity; an entry keeps
# its node alive, so an id is never reused while cached; cleared when full).
_CONSTANTS: dict = {}
_CONSTANTS_LIMIT = 1 << 16
_FLOAT_SCALARS: dict[str, Callable[[Any], Any]] = {}  # float dtype name -> numpy scalar type (bfloat16: float32)


def _scalar(value: Any, dtype: DataType) -> Any:
    kind = dtype.kind
    if kind == "float":
        make = _FLOAT_SCALARS.get(dtype.name)
        if make is None:
            make = _FLOAT_SCALARS[dtype.name] = np.dtype("float32" if dtype.name == "bfloat16" else dtype.name).type
        return make(value)
    if kind == "bool":
        return bool(value)
    return _wrap_int(int(value), dtype)


def _c_div(a: Any, b: Any) -> Any:
    if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
        if b == 0:
            raise EvaluationError("integer division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _c_mod(a: Any, b: Any) -> Any:
    if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
        return a - _c_div(a, b) * b
    return np.fmod(a, b)


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": _c_div, "mod": _c_mod, "min": min, "max": max,
    "bit_and": lambda a, b: a & b, "bit_or": lambda a, b: a | b, "bit_xor": lambda a, b: a ^ b,
    "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
}


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
        if s is not None:
            self.visit(s)

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

    # the evaluator's hottest call: the dispatch itself, not a method that calls it
    eval_expr = _Dispatch.visit

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


def evaluate_function(fn: Function, *args: Any, module: IRModule | None = None,
                      primitives: Mapping[str, Callable] | None = None) -> Any:
    """Run `fn` on numpy arrays / Python scalars; tensors are updated in place."""
    return Evaluator(module, primitives).call_function(fn, list(args))


def evaluate_expr(e: Expr, env: Mapping[Var, Any] | None = None) -> Any:
    """The value of an expression with the given variable values."""
    ev = Evaluator()
    ev.env = dict(env or {})
    return ev.eval_expr(e)
