"""Statements of a script function: Python AST -> IR statements.

Scoping follows C, because that is what the generated code has: a variable declared
inside a loop or an IR ``if`` lives until the end of that block. A branch of an ``if``
on a host condition is inlined into the current block (the other branch is never
traced), so names it binds stay visible, as in Python.
"""
from __future__ import annotations

import ast
from typing import Any, Optional

from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Expr, TensorSlice, Var, cast, convert
from hidet_framework.ir.func import FUNC_ATTR_KEYS, FUNC_KINDS
from hidet_framework.ir.stmt import (
    AssertStmt, AssignStmt, BufferStoreStmt, DeclareStmt, EvaluateStmt, IfStmt, ReturnStmt, Stmt, seq,
)
from hidet_framework.ir.type_infer import cast_if_needed, infer_type
from hidet_framework.ir.types import PointerType, Scope, TensorType
from hidet_framework.lang.annotations import resolve_type
from hidet_framework.lang.constructs import FUNC_ATTR_NAMES, CudaAttrs, ScriptAttrs, TensorDecl
from hidet_framework.lang.errors import ScriptError
from hidet_framework.lang.loop_statements import LoopStatements
from hidet_framework.lang.expr_tracer import _BINOPS, Binding, ExprTracer, is_ir, is_number

_FORBIDDEN_STMTS = {
    ast.With: "`with`", ast.AsyncWith: "`async with`", ast.Try: "`try`", ast.Raise: "`raise`",
    ast.FunctionDef: "a nested function definition", ast.AsyncFunctionDef: "a nested function definition",
    ast.ClassDef: "a class definition", ast.Import: "`import`", ast.ImportFrom: "`import`",
    ast.Global: "`global`", ast.Nonlocal: "`nonlocal`", ast.Delete: "`del`", ast.AsyncFor: "`async for`",
    ast.Match: "`match`",
}
if hasattr(ast, "TryStar"):
    _FORBIDDEN_STMTS[ast.TryStar] = "`try`"


class StmtTracer(LoopStatements, ExprTracer):
    """Traces a function body. After `trace_body`, `func_attrs` holds what the body
    set through ``attrs`` and `ret_type` the type of returned values."""

    def __init__(self, *args: Any, ret_type: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.blocks: list[list[Stmt]] = []
        self.loops: list[str] = []  # "ir" or "static", innermost last
        self.func_attrs: dict[str, Any] = {}
        self.ret_type = ret_type
        self.ret_declared = ret_type is not None

    # ---------------------------------------------------------------- blocks
    def emit(self, stmt: Stmt) -> None:
        self.blocks[-1].append(stmt)

    def trace_block(self, body: list, bindings: tuple = ()) -> Stmt:
        """The statements of `body` in a new C-like block; `bindings` are
        ``(name, value, kind, node)`` bound in it first."""
        self.blocks.append([])
        self.scopes.append({})
        try:
            for name, value, kind, node in bindings:
                self.bind(name, value, kind, node)
            for s in body:
                self.trace_stmt(s)
        finally:
            self.scopes.pop()
            stmts = self.blocks.pop()
        return seq(*stmts)

    def trace_body(self, body: list) -> Stmt:
        return self.trace_block(body)

    def trace_stmt(self, node: ast.stmt) -> None:
        method = getattr(self, "stmt_" + type(node).__name__, None)
        if method is None:
            what = _FORBIDDEN_STMTS.get(type(node), type(node).__name__)
            raise self.error(node, f"{what} is not allowed in a script function")
        try:
            method(node)
        except ScriptError:
            raise
        except Exception as exc:
            raise self.error(node, f"{type(exc).__name__}: {exc}") from exc

    # ------------------------------------------------------------ assignment
    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.eval(node.value)
        for target in node.targets:
            self.assign(target, value, node)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "only a plain name can carry a type annotation")
        t = resolve_type(self.eval(node.annotation))
        name = node.target.id
        if self.lookup_local(name) is not None and self.lookup_local(name).kind != "host":
            raise self.error(node, f"{name!r} is already declared (line {self.lookup_local(name).line})")
        if isinstance(t, TensorType):  # `buf: f32[4, 4]` declares a local array
            if node.value is not None:
                raise self.error(node, "a tensor annotation declares storage; it takes no value")
            self.declare_tensor(name, TensorDecl(t, Scope.LOCAL), node)
            return
        init = None
        if node.value is not None:
            init = self.coerce(self.eval(node.value), t, node, f"variable {name!r}", explicit=True)
        v = Var(name, t)
        self.emit(DeclareStmt(v, init))
        self.bind(name, v, "var", node)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        op = _BINOPS[type(node.op)]
        rhs = self.eval(node.value)
        target = node.target
        if isinstance(target, ast.Name):
            b = self.lookup_local(target.id)
            if b is not None and b.kind == "host":
                b.value = op(b.value, rhs)
                return
            if b is None or b.kind != "var":
                raise self.error(node, f"cannot update {target.id!r}: " + self._why_not_assignable(target.id, b))
            # C's compound assignment converts the result back to the variable's type
            self.emit(AssignStmt(b.value, self._convert_back(op(b.value, rhs), b.value.type)))
        elif isinstance(target, ast.Subscript):
            base, index = self._store_target(target)
            old = base[index]
            self.emit(BufferStoreStmt(base, index, self._convert_back(op(old, rhs), infer_type(old))))
        else:
            raise self.error(node, "augmented assignment needs a name or a tensor element")

    def assign(self, target: ast.AST, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value, node)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if is_ir(value) or not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                raise self.error(node, f"cannot unpack {value!r} into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
        elif isinstance(target, ast.Subscript):
            base, index = self._store_target(target)
            dtype = infer_type(base[index])
            self.emit(BufferStoreStmt(base, index, self._convert_store(value, dtype, node)))
        elif isinstance(target, ast.Attribute):
            self.set_func_attr(target, value, node)
        else:
            raise self.error(node, f"cannot assign to {ast.unparse(target)}")

    def assign_name(self, name: str, value: Any, node: ast.AST) -> None:
        if isinstance(value, TensorDecl):
            if self.lookup_local(name) is not None and self.lookup_local(name).kind != "host":
                raise self.error(node, f"{name!r} is already declared (line {self.lookup_local(name).line})")
            self.declare_tensor(name, value, node)
            return
        b = self.lookup_local(name)
        if b is not None and b.kind == "var":
            self.emit(AssignStmt(b.value, self.coerce(value, b.value.type, node, f"variable {name!r} "
                                                      f"(declared at line {b.line})", explicit=False)))
            return
        if b is not None and b.kind in ("loop", "tensor", "alias") or (b is not None and is_ir(value)):
            raise self.error(node, f"cannot assign to {name!r}: " + self._why_not_assignable(name, b))
        if is_number(value):
            value = convert(value.item() if hasattr(value, "item") else value)
        if not is_ir(value):  # a trace-time Python value: the name is an alias for it
            self.bind(name, value, "host", node)
            return
        t = infer_type(value)
        if isinstance(t, TensorType):  # a slice or another tensor: a name for it
            self.bind(name, value, "alias", node)
        elif isinstance(t, (DataType, PointerType)):
            v = Var(name, t)
            self.emit(DeclareStmt(v, value))
            self.bind(name, v, "var", node)
        else:
            raise self.error(node, f"{ast.unparse(node.value) if hasattr(node, 'value') else name} has no value "
                                   f"(it returns nothing) and cannot be assigned to {name!r}")

    def _why_not_assignable(self, name: str, b: Optional[Binding]) -> str:
        if b is None:
            return "it is not a script variable here" + (
                " (a variable declared in a nested block ends with that block; declare it before, "
                "e.g. `x: f32 = 0.0`)")
        return {"loop": f"it is a loop variable (line {b.line})",
                "tensor": f"it is a tensor (line {b.line}); store elements with {name}[...] = value",
                "alias": f"it names a tensor slice (line {b.line})",
                "host": f"it holds the host value {b.value!r} (line {b.line}), not an IR variable"}.get(b.kind, b.kind)

    def declare_tensor(self, name: str, decl: TensorDecl, node: ast.AST) -> None:
        v = Var(name, decl.type)
        self.emit(DeclareStmt(v, decl.init, decl.scope))
        self.bind(name, v, "tensor", node)

    def coerce(self, value: Any, t: Any, node: ast.AST, what: str, explicit: bool) -> Expr:
        """`value` as type `t`. Host numbers become constants of `t`. An IR value of
        another type is an error, unless the type was written (`explicit`), which asks
        for a conversion."""
        if isinstance(value, TensorDecl):
            raise self.error(node, f"cannot initialise {what} with a tensor declaration")
        if is_number(value) and isinstance(t, DataType):
            return self.literal_as(value, t, node, what)
        if not is_ir(value):
            raise self.error(node, f"{what} has type {t}; cannot assign the host value {value!r}")
        vt = infer_type(value)
        if vt is t or (isinstance(vt, PointerType) and isinstance(t, PointerType) and str(vt) == str(t)):
            return value
        if explicit and not isinstance(vt, TensorType) and not isinstance(t, TensorType):
            return cast(value, t)
        short = getattr(t, "short", str(t))
        raise self.error(node, f"cannot assign a value of type {vt} to {what} of type {t}; "
                               f"convert it explicitly with cast(value, '{short}')")

    def _convert_store(self, value: Any, dtype: Any, node: ast.AST) -> Expr:
        if is_number(value):
            return self.literal_as(value, dtype, node, "the stored element")
        if not is_ir(value):
            raise self.error(node, f"cannot store the host value {value!r} into a tensor")
        return self._convert_back(value, dtype)

    @staticmethod
    def _convert_back(value: Any, dtype: Any) -> Expr:
        """A store or compound assignment converts to the target's type, like C; the
        cast is explicit in the IR so no backend has to guess."""
        return cast_if_needed(value, dtype) if isinstance(dtype, DataType) else convert(value)

    def _store_target(self, target: ast.Subscript) -> tuple:
        base = self.eval(target.value)
        index = self.eval_index(target.slice)
        if not is_ir(base):
            raise self.error(target, f"cannot store into the host value {base!r}; only tensors and pointers")
        self.check_indices(base, index, target)
        index = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, slice) for i in index):
            raise self.error(target, "cannot assign to a slice; store elements in a loop")
        if isinstance(base, TensorSlice):
            raise self.error(target, "cannot store through a slice yet; index the tensor itself")
        return base, tuple(convert(i) for i in index)

    # ---------------------------------------------------- function attributes
    def set_func_attr(self, target: ast.Attribute, value: Any, node: ast.AST) -> None:
        owner = self.eval(target.value)
        key = target.attr
        if isinstance(owner, ScriptAttrs):
            if key == "func_kind":
                if value not in FUNC_KINDS:
                    raise self.error(node, f"attrs.func_kind must be one of {', '.join(FUNC_KINDS)}; got {value!r}")
            elif key == "func_name":
                if not isinstance(value, str) or not value.isidentifier():
                    raise self.error(node, f"attrs.func_name must be an identifier string, got {value!r}")
            else:
                known = list(FUNC_ATTR_NAMES) + ["cuda." + k for k in FUNC_ATTR_KEYS]
                raise self.error(node, f"unknown function attribute attrs.{key}; known: {', '.join(known)}")
        elif isinstance(owner, CudaAttrs):
            if key not in FUNC_ATTR_KEYS:
                raise self.error(node, f"unknown attribute attrs.cuda.{key}; known: {', '.join(FUNC_ATTR_KEYS)}")
            value = self._launch_value(key, value, node)
        else:
            raise self.error(node, f"cannot set attribute {key!r} of {owner!r}; only attrs.* and attrs.cuda.*")
        self.func_attrs[key] = value

    def _launch_value(self, key: str, value: Any, node: ast.AST) -> Any:
        items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
        if key in ("grid_dim", "block_dim") and not 1 <= len(items) <= 3:
            raise self.error(node, f"attrs.cuda.{key} takes 1 to 3 dimensions, got {len(items)}")
        if key not in ("grid_dim", "block_dim") and len(items) != 1:
            raise self.error(node, f"attrs.cuda.{key} takes a single value, got {value!r}")
        for x in items:
            ok = (isinstance(x, int) and not isinstance(x, bool) and x >= 0) or (
                is_ir(x) and isinstance(infer_type(x), DataType) and infer_type(x).is_integer())
            if not ok:
                raise self.error(node, f"attrs.cuda.{key} needs non-negative ints or integer expressions "
                                       f"of the parameters, got {x!r}")
        return items if key in ("grid_dim", "block_dim") else items[0]

    # ---------------------------------------------------------- other forms
    def stmt_If(self, node: ast.If) -> None:
        cond = self.eval(node.test)
        if not is_ir(cond):  # meta-programming: trace only the branch taken
            for s in node.body if cond else node.orelse:
                self.trace_stmt(s)
            return
        then_body = self.trace_block(node.body)
        else_body = self.trace_block(node.orelse) if node.orelse else None
        self.emit(IfStmt(cond, then_body, else_body))

    def stmt_Return(self, node: ast.Return) -> None:
        if node.value is None:
            self.emit(ReturnStmt())
            return
        value = self.eval(node.value)
        if self.ret_type is None:
            if is_number(value):
                value = convert(value.item() if hasattr(value, "item") else value)
            if not is_ir(value) or not isinstance(infer_type(value), (DataType, PointerType)):
                raise self.error(node, f"a script function returns scalars or pointers, not {value!r}")
            self.ret_type = infer_type(value)
        else:
            value = self.coerce(value, self.ret_type, node, "the return value", explicit=self.ret_declared)
        self.emit(ReturnStmt(value))

    def stmt_Assert(self, node: ast.Assert) -> None:
        cond = self.eval(node.test)
        msg = "" if node.msg is None else str(self.eval(node.msg))
        if not is_ir(cond):  # a host assertion is a check on the template's parameters
            if not cond:
                raise self.error(node, f"static assertion failed: {msg or self.source.segment(node.test)}")
            return
        self.emit(AssertStmt(cond, msg or self.source.segment(node.test)))

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring or comment string
        value = self.eval(node.value)
        if isinstance(value, TensorDecl):
            raise self.error(node, "a tensor declaration needs a name: x = shared_tensor(...)")
        if isinstance(value, Stmt):  # a host helper that builds a statement
            self.emit(value)
        elif is_ir(value):
            self.emit(EvaluateStmt(value))
        # a host value (e.g. None from a helper run for its trace-time effect) emits nothing

    def stmt_Pass(self, node: ast.Pass) -> None:
        pass

