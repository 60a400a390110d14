"""Expressions of a script function: Python AST -> IR expressions or host values.

Every expression evaluates to either an IR `Expr` (it depends on run-time values) or a
plain Python value (a *host* value, known at trace time: ints, tuples, mappings,
layouts, functions). Operators on two host values run in Python, which is what makes
templates work: ``block * 4`` is folded, ``i * 4`` builds IR. Only the expression forms
below are accepted; anything else is a `ScriptError` at the user's line.
"""
from __future__ import annotations

import ast
import builtins
import operator
from typing import Any, Callable, Optional

import attrs

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import (
    Call, Expr, cast, const, equal, if_then_else, logical_and, logical_not, logical_or, maximum,
    minimum, not_equal,
)
from hidet_framework.ir.type_infer import cast_if_needed, infer_type
from hidet_framework.ir.types import PointerType, TensorType
from hidet_framework.lang.errors import ScriptError, SourceInfo


@attrs.define
class Binding:
    """What a script-local name stands for.

    :param value: what the name evaluates to (a `Var`, an IR expression, or a host value).
    :param kind: ``var`` (an assignable IR variable), ``loop`` (a loop index),
        ``tensor`` (a tensor parameter or declared tensor), ``alias`` (a name for an IR
        expression, e.g. a slice) or ``host`` (a trace-time Python value).
    :param line: the user's file line where it was bound.
    """

    value: Any
    kind: str
    line: Optional[int] = None


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
    ast.MatMult: operator.matmul,
}
_HOST_ONLY_COMPARE = {ast.Is: operator.is_, ast.IsNot: operator.is_not,
                      ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_FORBIDDEN_EXPRS = {
    ast.Lambda: "lambda", ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression",
    ast.NamedExpr: "an assignment expression (:=)", ast.Await: "await", ast.Yield: "yield",
    ast.YieldFrom: "yield from", ast.Set: "a set literal",
}


def is_ir(value: Any) -> bool:
    return isinstance(value, Expr)


def type_of(value: Any) -> Any:
    return infer_type(value) if isinstance(value, Expr) else None


class ExprTracer:
    """Evaluates expressions; `StmtTracer` extends it with statements.

    :param source: where the function came from (for errors).
    :param closure: host names of the user's function (its closure, and the locals of
        the frame that defined it), consulted after script locals.
    :param globals_: the function's module globals, consulted next; builtins come last.
    """

    def __init__(self, source: SourceInfo, closure: dict, globals_: dict) -> None:
        self.source = source
        self.closure = closure
        self.globals = globals_
        self.scopes: list[dict[str, Binding]] = [{}]
        self.callees: list[Any] = []  # ScriptFunctions called, in first-call order

    # --------------------------------------------------------------- errors
    def error(self, node: Optional[ast.AST], reason: str) -> ScriptError:
        return self.source.error(node, reason)

    # ---------------------------------------------------------------- names
    def lookup_local(self, name: str) -> Optional[Binding]:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def lookup(self, name: str, node: ast.AST) -> Any:
        b = self.lookup_local(name)
        if b is not None:
            return b.value
        for table in (self.closure, self.globals, vars(builtins)):
            if name in table:
                return table[name]
        raise self.error(node, f"name {name!r} is not defined (not a script local, closure variable, global or builtin)")

    def bind(self, name: str, value: Any, kind: str, node: Optional[ast.AST]) -> None:
        self.scopes[-1][name] = Binding(value, kind, self.source.file_line(node))

    # ----------------------------------------------------------- evaluation
    def eval(self, node: ast.AST) -> Any:
        """The value of an expression node: an IR `Expr` or a host value."""
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            what = _FORBIDDEN_EXPRS.get(type(node), type(node).__name__)
            raise self.error(node, f"{what} is not allowed in a script function")
        try:
            return method(node)
        except ScriptError:
            raise
        except Exception as exc:  # an IR builder or host helper refused: say where
            raise self.error(node, f"{type(exc).__name__}: {exc}") from exc

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        obj = self.eval(node.value)
        if is_ir(obj) and node.attr in ("shape", "dtype", "type"):
            t = infer_type(obj)
            if node.attr == "type":
                return t
            if isinstance(t, TensorType):
                return t.shape if node.attr == "shape" else t.dtype
            if node.attr == "dtype" and isinstance(t, DataType):
                return t
        if not hasattr(obj, node.attr):
            raise self.error(node, f"{_describe(obj)} has no attribute {node.attr!r}")
        return getattr(obj, node.attr)

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self._elements(node.elts))

    def expr_List(self, node: ast.List) -> list:
        return self._elements(node.elts)

    def expr_Dict(self, node: ast.Dict) -> dict:
        out: dict = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(self.eval(v))
            else:
                out[self.eval(k)] = self.eval(v)
        return out

    def _elements(self, elts: list) -> list:
        out: list = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self.eval(e.value))
            else:
                out.append(self.eval(e))
        return out

    def expr_JoinedStr(self, node: ast.JoinedStr) -> str:
        parts = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                x = self.eval(v.value)
                x = {115: str, 114: repr, 97: ascii}.get(v.conversion, lambda y: y)(x)
                spec = self.eval(v.format_spec) if v.format_spec is not None else ""
                parts.append(format(x, spec) if not is_ir(x) else str(x))
            else:
                parts.append(str(self.eval(v)))
        return "".join(parts)

    # ------------------------------------------------------------ operators
    def expr_BinOp(self, node: ast.BinOp) -> Any:
        a, b = self.eval(node.left), self.eval(node.right)
        if (is_ir(a) or is_ir(b)) and isinstance(node.op, (ast.Pow, ast.MatMult)):
            raise self.error(node, f"operator {type(node.op).__name__} is not supported on IR values")
        return _BINOPS[type(node.op)](a, b)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        a = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            return logical_not(a) if is_ir(a) else not a
        if isinstance(node.op, ast.USub):
            return -a
        if isinstance(node.op, ast.UAdd):
            return a
        return ~a

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        # Host operands follow Python (short-circuit, so a host guard can protect what
        # follows it); IR operands combine into one logical expression.
        is_and = isinstance(node.op, ast.And)
        ir_parts: list = []
        last_host: Any = None
        for v in node.values:
            x = self.eval(v)
            if is_ir(x):
                ir_parts.append(x)
                continue
            last_host = x
            if bool(x) != is_and:  # False in an `and`, True in an `or`: decided
                return x if not ir_parts else bool(x)
        if not ir_parts:
            return last_host
        return logical_and(*ir_parts) if is_and else logical_or(*ir_parts)

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.eval(node.left)
        results = []
        for op, comp in zip(node.ops, node.comparators):
            right = self.eval(comp)
            results.append(self._compare(op, left, right, node))
            left = right
        if not any(is_ir(r) for r in results):
            return all(results)
        ir_results = [r for r in results if is_ir(r)]
        if not all(r for r in results if not is_ir(r)):
            return False
        return logical_and(*ir_results) if len(ir_results) > 1 else ir_results[0]

    def _compare(self, op: ast.cmpop, a: Any, b: Any, node: ast.AST) -> Any:
        if not (is_ir(a) or is_ir(b)):
            fn = {ast.Eq: operator.eq, ast.NotEq: operator.ne, **_COMPARE, **_HOST_ONLY_COMPARE}[type(op)]
            return fn(a, b)
        if isinstance(op, ast.Eq):
            return equal(a, b)
        if isinstance(op, ast.NotEq):
            return not_equal(a, b)
        if type(op) in _HOST_ONLY_COMPARE:
            raise self.error(node, f"'{type(op).__name__}' comparison is only allowed between host values")
        return _COMPARE[type(op)](a, b)

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        c = self.eval(node.test)
        if not is_ir(c):  # decided at trace time: the other branch is never traced
            return self.eval(node.body if c else node.orelse)
        return if_then_else(c, self.eval(node.body), self.eval(node.orelse))

    # ------------------------------------------------------------ subscripts
    def eval_index(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Tuple):
            return tuple(self.eval_index(e) for e in node.elts)
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.eval(p) for p in (node.lower, node.upper, node.step)]
            return slice(*parts)
        return self.eval(node)

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        base = self.eval(node.value)
        index = self.eval_index(node.slice)
        if is_ir(base):
            self.check_indices(base, index, node)
        return base[index]

    def check_indices(self, base: Expr, index: Any, node: ast.AST) -> None:
        t = infer_type(base)
        n = len(index) if isinstance(index, tuple) else 1
        if isinstance(t, TensorType):
            if n != t.rank:
                raise self.error(node, f"tensor {ast.unparse(node.value)} of type {t} has rank {t.rank}, "
                                       f"indexed with {n} index(es)")
        elif isinstance(t, PointerType):
            if n != 1 or isinstance(index, slice):
                raise self.error(node, f"pointer {ast.unparse(node.value)} takes exactly one (non-slice) index")
        else:
            raise self.error(node, f"{ast.unparse(node.value)} has type {t} and cannot be indexed")

    # ----------------------------------------------------------------- calls
    def expr_Call(self, node: ast.Call) -> Any:
        func = self.eval(node.func)
        args = self._elements(node.args)
        kwargs: dict = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.eval(kw.value))
            else:
                kwargs[kw.arg] = self.eval(kw.value)
        return self.call(func, args, kwargs, node)

    def call(self, func: Any, args: list, kwargs: dict, node: ast.AST) -> Any:
        from hidet_framework.lang.script import ScriptFunction  # script.py imports this module

        if isinstance(func, ScriptFunction):
            return self.call_script(func, args, kwargs, node)
        if func is builtins.range:
            raise self.error(node, "range() is only allowed as the iterable of a for loop")
        any_ir = any(is_ir(a) for a in args)
        if func in (builtins.min, builtins.max) and any_ir:
            fold = minimum if func is builtins.min else maximum
            out = args[0]
            for a in args[1:]:
                out = fold(out, a)
            return out
        if func is builtins.abs and any_ir:
            (x,) = args
            return if_then_else(x < 0, -x, x)
        if func in (builtins.int, builtins.float, builtins.bool) and any_ir:
            target = {builtins.int: dtypes.int32, builtins.float: dtypes.float32, builtins.bool: dtypes.boolean}[func]
            return cast(args[0], target)
        try:
            return func(*args, **kwargs)
        except ScriptError:
            raise
        except Exception as exc:
            name = getattr(func, "__name__", None) or _describe(func)
            raise self.error(node, f"calling {name} failed: {type(exc).__name__}: {exc}") from exc

    def call_script(self, callee: Any, args: list, kwargs: dict, node: ast.AST) -> Call:
        fn = callee.ir
        params = list(fn.params)
        names = callee.param_names
        if len(args) > len(params):
            raise self.error(node, f"{fn.name}() takes {len(params)} argument(s), got {len(args) + len(kwargs)}")
        bound = list(args) + [None] * (len(params) - len(args))
        for k, v in kwargs.items():
            if k not in names:
                raise self.error(node, f"{fn.name}() has no parameter {k!r}")
            pos = names.index(k)
            if pos < len(args):
                raise self.error(node, f"{fn.name}() got parameter {k!r} twice")
            bound[pos] = v
        missing = [names[i] for i, v in enumerate(bound) if v is None]
        if missing:
            raise self.error(node, f"{fn.name}() takes {len(params)} argument(s), got {len(params) - len(missing)} "
                                   f"(missing {', '.join(missing)})")
        converted = [self.convert_arg(p, a, fn.name, node) for p, a in zip(params, bound)]
        if all(c is not callee for c in self.callees):
            self.callees.append(callee)
        return Call(fn.name, tuple(converted), fn.ret_type)

    def literal_as(self, value: Any, t: DataType, node: ast.AST, what: str) -> Expr:
        """A host number as a constant of type `t` (refusing to drop a fraction)."""
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, float) and not t.is_float():
            raise self.error(node, f"{what} has type {t}; the float {value!r} would be truncated "
                                   f"(write cast({value!r}, '{t.short}') if that is meant)")
        return const(value, t)

    def convert_arg(self, param: Any, arg: Any, fname: str, node: ast.AST) -> Expr:
        pt = param.type
        if isinstance(pt, DataType):
            if is_ir(arg):
                at = infer_type(arg)
                if not isinstance(at, DataType):
                    raise self.error(node, f"{fname}(): parameter {param.hint!r} is a {pt} scalar, got a {at} value")
                return cast_if_needed(arg, pt)  # C converts arguments the same way
            if is_number(arg):
                return self.literal_as(arg, pt, node, f"{fname}() parameter {param.hint!r}")
            raise self.error(node, f"{fname}(): parameter {param.hint!r} needs a {pt} value, got {_describe(arg)}")
        if not is_ir(arg) or not isinstance(infer_type(arg), (TensorType, PointerType)):
            raise self.error(node, f"{fname}(): parameter {param.hint!r} is a tensor/pointer ({pt}), "
                                   f"got {_describe(arg)}")
        return arg


def is_number(value: Any) -> bool:
    """A host number: Python bool/int/float or a numpy scalar."""
    return isinstance(value, (bool, int, float)) or (hasattr(value, "dtype") and getattr(value, "shape", None) == ())


def _describe(value: Any) -> str:
    if isinstance(value, Expr):
        return f"IR value {value} of type {infer_type(value)}"
    return f"{type(value).__name__} {value!r}"
