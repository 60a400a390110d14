"""The IR evaluator's nodes compiled once to Python closures.

`closure(node)` returns a function of the evaluator that does what the tree-walking
``Evaluator.visit_<Node>`` methods do for `node`, with the children's closures called
directly: the dispatch, the node's type (``infer_type``), its constant's value and its
converter to the result type are looked up once per node instead of once per
evaluation. The per-evaluation work left is the node's own arithmetic. Values are the
same as the tree walker's, bit for bit (tests/analysis/test_evaluator_closures.py runs
both); a node that needs anything unusual (a type that cannot be inferred, a dtype numpy
has no scalar for, a tensor declaration, inline assembly, a node subclass) gets a
closure that calls the tree walker's method for it, so it fails or works as before, at
evaluation time.

Closures are kept per node (nodes are immutable and hash by identity; an entry keeps its
node alive, so an id is never reused while cached; cleared when full) and shared by all
evaluators: a closure reads the variables, primitives and module of the evaluator it is
called with.
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from hidet_framework.analysis.evaluator_values import (
    _BINARY, Buffer, EvaluationError, PointerValue, SliceValue, _Break, _c_div, _c_mod, _Continue,
    _Return, _scalar, scalar_of, typed_converter as _typed,
)
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import (
    BinaryOp, Call, Cast, Constant, Dereference, IfThenElse, Node, TensorElement, UnaryOp, Var,
)
from hidet_framework.ir.primitives import lookup_primitive
from hidet_framework.ir.stmt import (
    AssertStmt, AssignStmt, BreakStmt, BufferStoreStmt, ContinueStmt, DeclareStmt,
    EvaluateStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, WhileStmt,
)
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import TensorType

if TYPE_CHECKING:
    from hidet_framework.analysis.evaluator import Evaluator

Run = Callable[["Evaluator"], Any]

_CLOSURES: dict = {}
_CLOSURES_LIMIT = 1 << 17
_MISSING = object()
# the same functions as _BINARY's, called without a Python frame of their own
_OPERATORS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
              "bit_and": operator.and_, "bit_or": operator.or_, "bit_xor": operator.xor,
              "shl": operator.lshift, "shr": operator.rshift, "eq": operator.eq,
              "ne": operator.ne, "lt": operator.lt, "le": operator.le}


def _none(ev: Evaluator) -> None:
    return None


def closure(node: Any) -> Run:
    """The closure that evaluates `node` (an expression or a statement; None: nothing)."""
    if node is None:
        return _none
    if not isinstance(node, Node):  # not cacheable by identity: let the walker refuse it
        return _walked(node)
    run = _CLOSURES.get(node)
    if run is None:
        build = _BUILDERS.get(type(node))
        run = _walked(node) if build is None else build(node)
        if len(_CLOSURES) >= _CLOSURES_LIMIT:
            _CLOSURES.clear()
        _CLOSURES[node] = run
    return run


def _walked(node: Any) -> Run:
    """The tree walker's method for this node (its children still run as closures)."""
    def run(ev: Evaluator) -> Any:
        return ev.visit(node)
    return run


# ----------------------------------------------------------------- expressions
def _constant(e: Constant) -> Run:
    try:
        value = _scalar(e.value, e.dtype)
    except Exception:  # noqa: BLE001 - raised when evaluated, as the walker does
        return _walked(e)
    run = lambda ev: value  # noqa: E731
    run.constant = value  # read by _binary: an operand it need not call
    return run


def _var(e: Var) -> Run:
    def run(ev: Evaluator) -> Any:
        value = ev.env.get(e, _MISSING)
        if value is _MISSING:
            raise EvaluationError(f"variable {e.hint!r} is not defined here")
        return value
    return run


def _binary(e: BinaryOp) -> Run:
    op, fa, fb = e.op, closure(e.a), closure(e.b)
    if op == "and":
        return lambda ev: bool(fa(ev)) and bool(fb(ev))
    if op == "or":
        return lambda ev: bool(fa(ev)) or bool(fb(ev))
    fn = _OPERATORS.get(op) or _BINARY.get(op)
    try:
        t = infer_type(e)
        convert_to = _typed(t)
    except Exception:  # noqa: BLE001
        fn = None
    if fn is None:
        return _walked(e)
    sign = 1 if op == "add" else -1  # pointer arithmetic: the walker adds b for add, -b otherwise
    if isinstance(t, DataType) and t.kind == "int":
        return _signed_binary(fn, fa, fb, sign, t.bits)

    if convert_to is None:
        def run(ev: Evaluator) -> Any:
            a, b = fa(ev), fb(ev)
            if isinstance(a, PointerValue):
                return PointerValue(a, a.base + (b if sign > 0 else -b))
            return fn(a, b)
    else:
        def run(ev: Evaluator) -> Any:
            a, b = fa(ev), fb(ev)
            if isinstance(a, PointerValue):
                return PointerValue(a, a.base + (b if sign > 0 else -b))
            return convert_to(fn(a, b))
    return run


def _index_div(a: Any, b: Any) -> Any:  # _c_div, with non-negative ints (indices) first
    return a // b if type(a) is int and type(b) is int and a >= 0 and b > 0 else _c_div(a, b)


def _index_mod(a: Any, b: Any) -> Any:  # _c_mod likewise: C's remainder is Python's there
    return a % b if type(a) is int and type(b) is int and a >= 0 and b > 0 else _c_mod(a, b)


def _signed_binary(fn: Callable, fa: Run, fb: Run, sign: int, bits: int) -> Run:
    """A binary op of a signed int type (indices: most of the nodes evaluated) with the
    wrap of ``scalar_of`` written out, and a constant right operand not called."""
    mask, half, full = (1 << bits) - 1, 1 << (bits - 1), 1 << bits
    fn = {_c_div: _index_div, _c_mod: _index_mod}.get(fn, fn)
    b = getattr(fb, "constant", _MISSING)
    if b is _MISSING:
        def run(ev: Evaluator) -> Any:
            a, b = fa(ev), fb(ev)
            if isinstance(a, PointerValue):
                return PointerValue(a, a.base + (b if sign > 0 else -b))
            v = int(fn(a, b)) & mask
            return v - full if v >= half else v
    else:
        def run(ev: Evaluator) -> Any:
            a = fa(ev)
            if isinstance(a, PointerValue):
                return PointerValue(a, a.base + (b if sign > 0 else -b))
            v = int(fn(a, b)) & mask
            return v - full if v >= half else v
    return run


def _unary(e: UnaryOp) -> Run:
    fa = closure(e.a)
    if e.op == "not":
        return lambda ev: not fa(ev)
    try:
        convert_to = scalar_of(infer_type(e))
    except Exception:  # noqa: BLE001
        return _walked(e)
    if e.op == "neg":
        return lambda ev: convert_to(-fa(ev))
    return lambda ev: convert_to(~fa(ev))


def _cast(e: Cast) -> Run:
    fv = closure(e.expr)
    if not isinstance(e.dtype, DataType):
        return fv
    to_int, convert_to = e.dtype.is_integer(), scalar_of(e.dtype)

    def run(ev: Evaluator) -> Any:
        value = fv(ev)
        if to_int and not isinstance(value, (int, bool)):
            value = int(np.trunc(value))
        return convert_to(value)
    return run


def _call(e: Call) -> Run:
    func, fargs = e.func, tuple(closure(a) for a in e.args)

    def run(ev: Evaluator) -> Any:
        args = [f(ev) for f in fargs]
        if func in ev.primitives:
            return ev.primitives[func](*args)
        prim = lookup_primitive(func)
        if prim is not None:
            if prim.evaluate is None:
                raise EvaluationError(f"primitive {func!r} has no Python implementation")
            return prim.evaluate(*args)
        if ev.module is None or func not in ev.module.functions:
            raise EvaluationError(f"call to unknown function {func!r}")
        return ev.call_function(ev.module.functions[func], args)
    return run


def _locator(base_expr: Any, index_exprs: tuple) -> Callable[[Evaluator], tuple]:
    """What ``Evaluator._locate`` does for these expressions: (buffer, flat index)."""
    fbase, fidx = closure(base_expr), tuple(closure(i) for i in index_exprs)

    def locate(ev: Evaluator) -> tuple:
        base = fbase(ev)
        indices = [int(f(ev)) for f in fidx]
        while isinstance(base, SliceValue):
            indices = base.full_indices(indices)
            base = base.base
        if not isinstance(base, Buffer):
            raise EvaluationError(f"{base_expr} is not a tensor or pointer")
        flat_index = base.int_offset(ev, indices)
        if not 0 <= flat_index < base.flat.size:
            raise EvaluationError(f"out-of-bounds access {base_expr}{indices} -> {flat_index} of {base.flat.size}")
        return base, flat_index
    return locate


def _element(e: TensorElement) -> Run:
    locate = _locator(e.base, e.indices)

    def run(ev: Evaluator) -> Any:
        target, flat_index = locate(ev)
        return target.flat[flat_index]
    return run


def _if_then_else(e: IfThenElse) -> Run:
    fc, ft, fe = closure(e.cond), closure(e.then_expr), closure(e.else_expr)
    return lambda ev: ft(ev) if fc(ev) else fe(ev)


def _dereference(e: Dereference) -> Run:
    fp = closure(e.ptr)

    def run(ev: Evaluator) -> Any:
        p = fp(ev)
        return p.flat[p.base]
    return run


# ------------------------------------------------------------------ statements
def _seq(s: SeqStmt) -> Run:
    fs = tuple(closure(st) for st in s.stmts)

    def run(ev: Evaluator) -> None:
        for f in fs:
            f(ev)
    return run


def _declare(s: DeclareStmt) -> Run:
    if isinstance(s.var.type, TensorType):
        return _walked(s)  # allocation or a view: once per declaration, not per element
    var, fi, convert_to = s.var, closure(s.init), _typed(s.var.type)

    def run(ev: Evaluator) -> None:
        if s.init is None:
            ev.env[var] = None
        else:
            value = fi(ev)
            ev.env[var] = value if convert_to is None else convert_to(value)
    return run


def _assign(s: AssignStmt) -> Run:
    var, fv, convert_to = s.var, closure(s.value), _typed(s.var.type)

    def run(ev: Evaluator) -> None:
        if var not in ev.env:
            raise EvaluationError(f"assignment to undeclared variable {var.hint}")
        value = fv(ev)
        ev.env[var] = value if convert_to is None else convert_to(value)
    return run


def _store(s: BufferStoreStmt) -> Run:
    locate, fv = _locator(s.base, s.indices), closure(s.value)

    def run(ev: Evaluator) -> None:
        target, flat_index = locate(ev)
        target.flat[flat_index] = fv(ev)
    return run


def _let(s: LetStmt) -> Run:
    var, fv, body, convert_to = s.var, closure(s.value), closure(s.body), _typed(s.var.type)

    def run(ev: Evaluator) -> None:
        value = fv(ev)
        ev.env[var] = value if convert_to is None else convert_to(value)
        body(ev)
    return run


def _for(s: ForStmt) -> Run:
    var, fext, body = s.var, closure(s.extent), closure(s.body)

    def run(ev: Evaluator) -> None:
        for i in range(int(fext(ev))):
            ev.env[var] = i
            try:
                body(ev)
            except _Break:
                break
            except _Continue:
                pass
    return run


def _for_mapping(s: ForMappingStmt) -> Run:
    fw, body, variables, mapping = closure(s.worker), closure(s.body), s.vars, s.mapping

    def run(ev: Evaluator) -> None:
        worker = int(fw(ev))
        if worker >= mapping.num_workers:
            return  # more workers than the mapping has: the extra ones run no task
        for task in mapping.worker2task(worker):
            for v, i in zip(variables, task):
                ev.env[v] = int(i)
            body(ev)
    return run


def _while(s: WhileStmt) -> Run:
    fc, body = closure(s.cond), closure(s.body)

    def run(ev: Evaluator) -> None:
        while fc(ev):
            try:
                body(ev)
            except _Break:
                break
            except _Continue:
                pass
    return run


def _if(s: IfStmt) -> Run:
    fc, ft, fe = closure(s.cond), closure(s.then_body), closure(s.else_body)

    def run(ev: Evaluator) -> None:
        if fc(ev):
            ft(ev)
        else:
            fe(ev)
    return run


def _assert(s: AssertStmt) -> Run:
    fc = closure(s.cond)

    def run(ev: Evaluator) -> None:
        if not fc(ev):
            raise EvaluationError(f"assertion failed: {s.message or s.cond}")
    return run


def _return(s: ReturnStmt) -> Run:
    fv = closure(s.value)

    def run(ev: Evaluator) -> None:
        raise _Return(None if s.value is None else fv(ev))
    return run


def _raise(kind: type) -> Callable[[Any], Run]:
    def build(s: Any) -> Run:
        def run(ev: Evaluator) -> None:
            raise kind()
        return run
    return build


def _evaluate(s: EvaluateStmt) -> Run:
    return closure(s.expr)  # its value is dropped by the caller (a statement returns None)


_BUILDERS: dict[type, Callable[[Any], Run]] = {
    Constant: _constant, Var: _var, BinaryOp: _binary, UnaryOp: _unary, Cast: _cast,
    Call: _call, TensorElement: _element, IfThenElse: _if_then_else, Dereference: _dereference,
    SeqStmt: _seq, DeclareStmt: _declare, AssignStmt: _assign, BufferStoreStmt: _store,
    LetStmt: _let, ForStmt: _for, ForMappingStmt: _for_mapping, WhileStmt: _while, IfStmt: _if,
    AssertStmt: _assert, ReturnStmt: _return, EvaluateStmt: _evaluate,
    BreakStmt: _raise(_Break), ContinueStmt: _raise(_Continue),
}  # the rest (TensorSlice, Address, AsmStmt, ...) run through the walker: rare, not per element
