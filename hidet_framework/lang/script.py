"""``@script`` and ``script_module``: Python functions in, IR functions and modules out.

Tracing happens once, when the decorator runs: names resolve against the function's
closure and globals *at that moment*, which is what makes templates work (a Python
function that defines a script function from its own parameters gets one kernel per
call). Consequently a script function must be defined after the script functions it
calls, and cannot call itself.
"""
from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from typing import Any, Callable, Iterable, Optional

from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Var
from hidet_framework.ir.func import Function, IRModule, module
from hidet_framework.ir.printer import format_ir
from hidet_framework.ir.types import TensorType
from hidet_framework.lang.annotations import resolve_type
from hidet_framework.lang.errors import ScriptError, SourceInfo
from hidet_framework.lang.stmt_tracer import StmtTracer


class ScriptFunction:
    """The result of ``@script``: the IR `Function` (``.ir``) and the script functions
    it calls (``.callees``). Printable; callable only from other script functions."""

    def __init__(self, ir: Function, callees: tuple, python_function: Callable, param_names: tuple) -> None:
        self.ir = ir
        self.callees = callees
        self.python_function = python_function
        self.param_names = param_names

    @property
    def name(self) -> str:
        return self.ir.name

    def __str__(self) -> str:
        return format_ir(self.ir)

    def __repr__(self) -> str:
        return f"<ScriptFunction {self.ir.name} ({self.ir.kind})>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"script function {self.name} is IR, not Python: call it from another @script "
                        f"function, evaluate it with hidet_framework.analysis.evaluator.evaluate_function(f.ir, ...), "
                        f"or compile it with a backend")


def script(fn: Optional[Callable] = None, *, name: Optional[str] = None) -> Any:
    """Trace `fn` into an IR function. Use as ``@script`` or ``@script(name="add_f16")``.

    :raises ScriptError: naming the file and line of the first construct that cannot be
        traced.
    """
    if fn is None:
        def decorate(f: Callable) -> ScriptFunction:
            return _trace(f, name, _defining_locals(sys._getframe(1)))
        return decorate
    return _trace(fn, name, _defining_locals(sys._getframe(1)))


def _defining_locals(frame: Any) -> dict:
    """The locals of the frame that applies the decorator. A template's parameters are
    only in the closure when the body uses them; a name used only in an annotation
    (``a: f32[n]`` under ``from __future__ import annotations``) is found here."""
    try:
        return {} if frame.f_locals is frame.f_globals else dict(frame.f_locals)
    finally:
        del frame  # no reference cycle through the frame


# Parsed definitions by code object. Templates define their script functions inside
# `build`, so each candidate traced the same `def` again, and finding and parsing its
# source (`inspect`'s tokenizer, `ast.parse`) was a fifth of a matmul template's build
# (issue 11). The tree is only read by tracing, except that `_trace_params` replaces a
# string annotation by its parsed expression, which a second trace leaves as it is.
_PARSED: dict = {}
_PARSED_LIMIT = 1024


def _parse(fn: Callable) -> tuple[ast.FunctionDef, SourceInfo]:
    hit = _PARSED.get(fn.__code__)
    if hit is None:
        if len(_PARSED) >= _PARSED_LIMIT:
            _PARSED.clear()
        hit = _PARSED[fn.__code__] = _parse_source(fn)
    return hit


def _parse_source(fn: Callable) -> tuple[ast.FunctionDef, SourceInfo]:
    filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise ScriptError(f"cannot read the source of {fn.__qualname__} ({exc}); script functions must live "
                          f"in a file", filename, fn.__code__.co_firstlineno) from exc
    source = SourceInfo(filename, start - 1, tuple(lines))
    tree = ast.parse(textwrap.dedent("".join(lines)))
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise source.error(fdef, "@script needs a plain `def` function")
    return fdef, source


def _closure_of(fn: Callable) -> dict:
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:  # a closure variable not assigned yet: leave it unresolved
            pass
    return out


def _trace(fn: Callable, name: Optional[str], defining_locals: dict) -> ScriptFunction:
    fdef, source = _parse(fn)
    tracer = StmtTracer(source, {**defining_locals, **_closure_of(fn)}, fn.__globals__)
    params = _trace_params(tracer, fdef)
    if fdef.returns is not None:
        ret = resolve_type(tracer.eval(fdef.returns)) if not _is_none(fdef.returns) else None
        tracer.ret_type, tracer.ret_declared = ret, ret is not None
    body = tracer.trace_body(fdef.body)
    fattrs = dict(tracer.func_attrs)
    kind = fattrs.pop("func_kind", "public")
    ir_name = name or fattrs.pop("func_name", None) or fdef.name
    fattrs.pop("func_name", None)
    ir = Function(ir_name, tuple(params), body, kind, tracer.ret_type, fattrs)
    return ScriptFunction(ir, tuple(tracer.callees), fn, tuple(p.hint for p in params))


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _trace_params(tracer: StmtTracer, fdef: ast.FunctionDef) -> list[Var]:
    a = fdef.args
    if a.vararg or a.kwarg or a.kwonlyargs:
        raise tracer.error(fdef, "script functions take positional parameters only (no *args, **kwargs, keyword-only)")
    if a.defaults:
        raise tracer.error(fdef, "script function parameters cannot have default values")
    args = list(a.posonlyargs) + list(a.args)
    names = {p.arg for p in args}
    for p in args:
        if p.annotation is None:
            raise tracer.error(p, f"parameter {p.arg!r} needs a type annotation (e.g. f32[n], ~f16, int32)")
    # Annotations may name other (scalar) parameters, as in `a: f32[n], n: int32`:
    # those that mention no parameter are read first, the others once those exist.
    for p in args:
        p.annotation = _annotation_ast(tracer, p.annotation)
    types: dict[str, Any] = {}
    refers = {p.arg: {n.id for n in ast.walk(p.annotation) if isinstance(n, ast.Name)} & names for p in args}
    for p in args:
        if not refers[p.arg]:
            types[p.arg] = _param_type(tracer, p)
    params_by_name = {n: Var(n, t) for n, t in types.items()}
    for n, v in params_by_name.items():
        tracer.bind(n, v, _binding_kind(v.type), fdef)
    for p in args:
        if p.arg in types:
            continue
        for ref in refers[p.arg]:
            if ref not in params_by_name or not isinstance(params_by_name[ref].type, DataType):
                raise tracer.error(p, f"the annotation of {p.arg!r} refers to parameter {ref!r}, which must be "
                                      f"a scalar integer parameter whose own annotation names no parameter")
        t = _param_type(tracer, p)
        params_by_name[p.arg] = Var(p.arg, t)
        tracer.bind(p.arg, params_by_name[p.arg], _binding_kind(t), p)
    return [params_by_name[p.arg] for p in args]


def _annotation_ast(tracer: StmtTracer, node: ast.expr) -> ast.expr:
    """A string annotation (``a: "f32[m, n]"``) parsed as the expression it spells,
    placed on the annotation's line. Python evaluates unquoted annotations when the
    `def` runs, so shapes naming other parameters need quotes or
    ``from __future__ import annotations``."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return node
    try:
        parsed = ast.parse(node.value.strip(), mode="eval").body
    except SyntaxError as exc:
        raise tracer.error(node, f"annotation {node.value!r} is not an expression: {exc.msg}") from exc
    for sub in ast.walk(parsed):
        if "lineno" in sub._attributes:
            ast.copy_location(sub, node)
    return parsed


def _binding_kind(t: Any) -> str:
    """Scalar and pointer parameters are variables; tensor parameters are tensors."""
    return "tensor" if isinstance(t, TensorType) else "var"


def _param_type(tracer: StmtTracer, p: ast.arg) -> Any:
    value = tracer.eval(p.annotation)
    try:
        return resolve_type(value)
    except TypeError as exc:
        raise tracer.error(p, f"bad annotation of parameter {p.arg!r}: {exc}") from exc


def script_module(*functions: Any, name: str = "module") -> IRModule:
    """An `IRModule` of the given script functions (or IR `Function`s) and, transitively,
    every script function they call; callees come before their callers."""
    ordered: list[Function] = []
    seen: dict[str, Any] = {}

    def visit(f: Any) -> None:
        ir = f.ir if isinstance(f, ScriptFunction) else f
        if not isinstance(ir, Function):
            raise TypeError(f"script_module takes script functions or IR Functions, got {f!r}")
        if ir.name in seen:
            if seen[ir.name] is not ir:
                raise ValueError(f"two different functions are named {ir.name!r}; give template instances "
                                 f"distinct names with attrs.func_name = ... or @script(name=...)")
            return
        seen[ir.name] = ir
        for c in getattr(f, "callees", ()):
            visit(c)
        ordered.append(ir)

    for f in _flatten(functions):
        visit(f)
    return module(name, ordered)


def _flatten(items: Iterable) -> list:
    out = []
    for f in items:
        out.extend(_flatten(f) if isinstance(f, (list, tuple)) else [f])
    return out
