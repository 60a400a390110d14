"""A printer whose output a person can read (Python-like, one statement a line).

Variables print under their hints, made unique per printed tree (``i``, ``i_1``...), so
two distinct variables with the same hint never look alike.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir.expr import (
    BINARY_OPS, UNARY_OPS, Address, BinaryOp, Call, Cast, Constant, Dereference, Expr,
    IfThenElse, TensorElement, TensorSlice, UnaryOp, Var,
)
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.functors import _Dispatch
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, BreakStmt, BufferStoreStmt, ContinueStmt, DeclareStmt,
    EvaluateStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, Stmt, WhileStmt,
)
from hidet_framework.ir.types import PointerType, TensorType

_INDENT = "    "


class IRPrinter(_Dispatch):
    def __init__(self) -> None:
        self.names: dict[Var, str] = {}
        self.taken: set[str] = set()

    # names
    def name_of(self, v: Var) -> str:
        name = self.names.get(v)
        if name is None:
            base = v.hint or "v"
            name, k = base, 0
            while name in self.taken:
                k += 1
                name = f"{base}_{k}"
            self.taken.add(name)
            self.names[v] = name
        return name

    def type_str(self, t: Any) -> str:
        if isinstance(t, TensorType):
            dims = ", ".join(self.expr(s) if isinstance(s, Expr) else str(s) for s in t.shape)
            return f"{t.dtype.short}[{dims}]"
        if isinstance(t, PointerType):
            return f"~{self.type_str(t.base) if t.base is not None else 'void'}"
        return getattr(t, "short", str(t))

    def expr(self, e: Any) -> str:
        return "None" if e is None else self.visit(e)

    # modules, functions
    def visit_IRModule(self, m: IRModule) -> str:
        return "\n\n".join(self.visit(f) for f in m.functions.values())

    def visit_Function(self, fn: Function) -> str:
        params = ", ".join(f"{self.name_of(p)}: {self.type_str(p.type)}" for p in fn.params)
        ret = f" -> {self.type_str(fn.ret_type)}" if fn.ret_type is not None else ""
        head = [f"def {fn.name}({params}){ret}:  # {fn.kind}"]
        for key, value in fn.attrs.items():
            shown = value
            if isinstance(value, tuple):
                shown = "(" + ", ".join(self.expr(x) if isinstance(x, Expr) else str(x) for x in value) + ")"
            head.append(f"{_INDENT}# attrs.{key} = {shown}")
        return "\n".join(head + self.block(fn.body, 1))

    # statements, as lists of lines
    def block(self, s: Stmt | None, depth: int) -> list[str]:
        if s is None:
            return [_INDENT * depth + "pass"]
        lines = self.visit(s)
        return [_INDENT * depth + line for line in lines] or [_INDENT * depth + "pass"]

    def visit_SeqStmt(self, s: SeqStmt) -> list[str]:
        return [line for st in s.stmts for line in self.visit(st)]

    def visit_DeclareStmt(self, s: DeclareStmt) -> list[str]:
        init = f" = {self.expr(s.init)}" if s.init is not None else ""
        return [f"declare {self.name_of(s.var)}: {self.type_str(s.var.type)} in {s.scope.value}{init}"]

    def visit_BufferStoreStmt(self, s: BufferStoreStmt) -> list[str]:
        idx = ", ".join(self.expr(i) for i in s.indices)
        return [f"{self.expr(s.base)}[{idx}] = {self.expr(s.value)}"]

    def visit_AssignStmt(self, s: AssignStmt) -> list[str]:
        return [f"{self.name_of(s.var)} = {self.expr(s.value)}"]

    def visit_LetStmt(self, s: LetStmt) -> list[str]:
        return [f"let {self.name_of(s.var)} = {self.expr(s.value)}"] + self.visit(s.body)

    def visit_ForStmt(self, s: ForStmt) -> list[str]:
        hints = []
        if s.parallel:
            hints.append("parallel")
        if s.unroll is not None:
            hints.append("unroll" if s.unroll is True else f"unroll={s.unroll}")
        tail = f"  # {', '.join(hints)}" if hints else ""
        head = f"for {self.name_of(s.var)} in range({self.expr(s.extent)}):{tail}"
        return [head] + self.block(s.body, 1)

    def visit_ForMappingStmt(self, s: ForMappingStmt) -> list[str]:
        names = ", ".join(self.name_of(v) for v in s.vars)
        return [f"for {names} in {s.mapping}.on({self.expr(s.worker)}):"] + self.block(s.body, 1)

    def visit_WhileStmt(self, s: WhileStmt) -> list[str]:
        return [f"while {self.expr(s.cond)}:"] + self.block(s.body, 1)

    def visit_BreakStmt(self, s: BreakStmt) -> list[str]:
        return ["break"]

    def visit_ContinueStmt(self, s: ContinueStmt) -> list[str]:
        return ["continue"]

    def visit_IfStmt(self, s: IfStmt) -> list[str]:
        lines = [f"if {self.expr(s.cond)}:"] + self.block(s.then_body, 1)
        if s.else_body is not None:
            lines += ["else:"] + self.block(s.else_body, 1)
        return lines

    def visit_EvaluateStmt(self, s: EvaluateStmt) -> list[str]:
        return [self.expr(s.expr)]

    def visit_AssertStmt(self, s: AssertStmt) -> list[str]:
        return [f"assert {self.expr(s.cond)}, {s.message!r}"]

    def visit_AsmStmt(self, s: AsmStmt) -> list[str]:
        outs = ", ".join(f"{c!r}: {self.expr(e)}" for c, e in s.outputs)
        ins = ", ".join(f"{c!r}: {self.expr(e)}" for c, e in s.inputs)
        return [f"asm({s.template!r}, outputs=[{outs}], inputs=[{ins}])"]

    def visit_ReturnStmt(self, s: ReturnStmt) -> list[str]:
        return ["return" if s.value is None else f"return {self.expr(s.value)}"]

    # expressions
    def visit_Constant(self, e: Constant) -> str:
        if e.dtype.is_bool():
            return "True" if e.value else "False"
        if e.dtype.name in ("int32", "float32"):
            return repr(e.value)
        return f"{e.dtype.short}({e.value!r})"

    def visit_Var(self, e: Var) -> str:
        return self.name_of(e)

    def visit_BinaryOp(self, e: BinaryOp) -> str:
        sym = BINARY_OPS[e.op][0]
        if e.op in ("min", "max"):
            return f"{sym}({self.expr(e.a)}, {self.expr(e.b)})"
        if e.op in ("and", "or"):
            sym = e.op
        return f"({self.expr(e.a)} {sym} {self.expr(e.b)})"

    def visit_UnaryOp(self, e: UnaryOp) -> str:
        sym = "not " if e.op == "not" else UNARY_OPS[e.op]
        return f"({sym}{self.expr(e.a)})"

    def visit_Cast(self, e: Cast) -> str:
        return f"cast({self.expr(e.expr)}, {self.type_str(e.dtype)})"

    def visit_Call(self, e: Call) -> str:
        return f"{e.func}({', '.join(self.expr(a) for a in e.args)})"

    def visit_TensorElement(self, e: TensorElement) -> str:
        return f"{self.expr(e.base)}[{', '.join(self.expr(i) for i in e.indices)}]"

    def visit_TensorSlice(self, e: TensorSlice) -> str:
        parts = []
        for idx, start, end in zip(e.indices, e.starts, e.ends):
            if idx is not None:
                parts.append(self.expr(idx))
            else:
                parts.append(f"{'' if start is None else self.expr(start)}:{'' if end is None else self.expr(end)}")
        return f"{self.expr(e.base)}[{', '.join(parts)}]"

    def visit_IfThenElse(self, e: IfThenElse) -> str:
        return f"({self.expr(e.then_expr)} if {self.expr(e.cond)} else {self.expr(e.else_expr)})"

    def visit_Address(self, e: Address) -> str:
        return f"&{self.expr(e.expr)}"

    def visit_Dereference(self, e: Dereference) -> str:
        return f"*{self.expr(e.ptr)}"

    def visit_Node(self, node: Any) -> str:
        """Expression kinds defined above the IR (e.g. compute reductions) print as
        ``Kind(field=value, ...)``."""
        import attrs

        def show(x: Any) -> str:
            if isinstance(x, Expr):
                return self.expr(x)
            if isinstance(x, tuple):
                return "(" + ", ".join(show(y) for y in x) + ")"
            return str(x)

        fields = ", ".join(f"{f.name}={show(getattr(node, f.name))}" for f in attrs.fields(type(node)))
        return f"{type(node).__name__}({fields})"


def format_ir(node: Any) -> str:
    """Readable text of any IR node."""
    out = IRPrinter().visit(node)
    return "\n".join(out) if isinstance(out, list) else out
