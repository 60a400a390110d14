"""The C-style code generator shared by the C (cpu) and CUDA C backends.

`CStyleCodegen` prints a *lowered* `IRModule` (no for-mapping, no tensor slice; tensor
elements indexed by one flat offset) as C-family source. What differs between C and
CUDA C lives in tables and small override points, not in copies of the printer:

- ``target_kind``: the key read from ``PrimitiveFunction.emit``;
- ``SCALAR_TYPE_NAMES`` / `scalar_type_name` / `vector_type_name` / `pointer_type_name`;
- `preamble` (includes, helpers) and `reserved_names` (what the preamble defines);
- `function_qualifiers` (``static inline``, ``__global__``, launch bounds...) and
  `param_decl` (how one parameter is declared, plus prologue lines it needs);
- `scope_prefix` (``__shared__``...), `for_pragmas` (unroll, OpenMP);
- `load_value` / `store_value` / `cast_value`: storage types whose arithmetic happens
  in another type (float16/bfloat16 computed in float);
- `float_literal`, `min_max`, `assert_failure`, ``ASM_KEYWORD``.

Names: every identifier printed comes from a `NameScope` (module scope for functions,
one scope per function for parameters and variables), so a hostile hint can never
inject code; free text (comments, string literals) goes through `comment_text` and
`c_string_literal`.
"""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

from hidet_framework.backend.c_style_expr import (  # noqa: F401  (re-exported for backends)
    BINARY_PRECEDENCE, PRIMARY, TERNARY, UNARY, CExprPrinter, CodegenError, _method_for, c_string_literal,
    comment_text,
)
from hidet_framework.backend.naming import NameScope, c_identifier
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Expr, TensorElement, Var, convert
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.stmt import IfStmt, LetStmt, SeqStmt, Stmt
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import PointerType, Scope, TensorType

__all__ = ["CStyleCodegen", "CodegenError", "may_alias", "c_string_literal", "comment_text", "PRIMARY", "UNARY", "TERNARY",
           "function_at", "source_excerpt"]

# What `CStyleCodegen.generate` prints above each function: compile errors name the IR
# function a failing line belongs to by looking for it.
_FUNCTION_MARKER = re.compile(r"/\*\s*hidet function:\s*(.*?)\s*\*/")


def may_alias(fn: Function, param: Var) -> bool:
    """Whether `param` may point into another parameter's buffer (an in-place output and
    its input, ``fusion/inplace.py``): declared without ``__restrict__`` then."""
    marked = fn.attrs.get("aliased_params", ())
    return bool(marked) and any(param is fn.params[p] for p in marked)


class CStyleCodegen(CExprPrinter):
    """Prints a lowered IR module as C-family source; subclass per backend."""

    target_kind = "c"
    SCALAR_TYPE_NAMES: dict[str, str] = {
        "bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
        "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
        "float32": "float", "float64": "double",
    }
    RESTRICT = "__restrict__"
    ASM_KEYWORD = "__asm__ __volatile__"
    ASM_KEYWORD_NONVOLATILE = "__asm__"
    INDENT = "    "

    def __init__(self, target: Any = None) -> None:
        self.target = target
        self.lines: list[str] = []
        self.depth = 0
        self.global_names: set[str] = set()
        self.func_names: dict[str, str] = {}
        self.names: dict[Var, str] = {}
        self.scope = NameScope()
        self.function: Function | None = None

    # ------------------------------------------------------------ override points
    def preamble(self, module: IRModule) -> list[str]:
        """Lines before the prototypes (includes, typedefs, helpers)."""
        return []

    def reserved_names(self) -> set[str]:
        """Identifiers the preamble defines; never handed out to IR names."""
        return set()

    def function_qualifiers(self, fn: Function) -> str:
        return "static inline" if fn.kind in ("device", "host") else ""

    def param_decl(self, fn: Function, param: Var, name: str) -> tuple[str, list[str]]:
        """Declaration of one parameter, and prologue lines the body starts with."""
        t = param.type
        restrict = "" if may_alias(fn, param) else f" {self.RESTRICT}"
        if isinstance(t, TensorType):  # tensors are passed as pointers to their elements
            return f"{self.type_name(t.dtype)}*{restrict} {name}", []
        if isinstance(t, PointerType):
            return f"{self.type_name(t)}{restrict} {name}", []
        return f"{self.type_name(t)} {name}", []

    def scope_prefix(self, scope: Scope) -> str:
        """Storage qualifier of a local declaration in `scope` (``__shared__ `` on CUDA)."""
        if scope in (Scope.LOCAL, Scope.REGISTER):
            return ""
        raise CodegenError(f"{self.target_kind}: cannot declare a variable in {scope.value} scope here")

    def for_pragmas(self, s: Any) -> list[str]:
        return []

    def scalar_type_name(self, t: DataType) -> str:
        try:
            return self.SCALAR_TYPE_NAMES[t.name]
        except KeyError:
            raise CodegenError(f"{self.target_kind}: no C type for dtype {t.name}") from None

    def vector_type_name(self, t: DataType) -> str:
        raise CodegenError(f"{self.target_kind}: vector type {t.name} is not supported")

    def pointer_type_name(self, t: PointerType) -> str:
        return ("void" if t.base is None else self.type_name(t.base)) + "*"

    def assert_failure(self, message: str) -> list[str]:
        """Statements run when an assertion fails; `message` is a C string literal."""
        raise NotImplementedError

    # ------------------------------------------------------------------ types
    def type_name(self, t: Any) -> str:
        if t is None:
            return "void"
        if isinstance(t, DataType):
            return self.vector_type_name(t) if t.lanes > 1 else self.scalar_type_name(t)
        if isinstance(t, PointerType):
            return self.pointer_type_name(t)
        if isinstance(t, TensorType):  # a tensor value is a pointer to its first element
            return self.type_name(t.dtype) + "*"
        raise CodegenError(f"cannot print type {t!r}")

    # ------------------------------------------------------------------ driver
    def generate(self, module: IRModule) -> str:
        self.module = module
        self.global_names = set(self.reserved_names())
        module_scope = NameScope(self.global_names)
        self.func_names = {}
        # Entry functions first: their C names must be exactly c_identifier(name), the
        # symbol the runtime looks up.
        for fn in sorted(module.functions.values(), key=lambda f: f.kind not in self.entry_kinds()):
            name = module_scope.unique(fn.name)
            if fn.kind in self.entry_kinds() and name != c_identifier(fn.name):
                raise CodegenError(f"entry function {fn.name!r}: its C name {c_identifier(fn.name)!r} is taken "
                                   f"(by another function or a name the generated code defines)")
            self.func_names[fn.name] = name
        self.global_names |= set(self.func_names.values())
        bodies: list[str] = []
        protos: list[str] = []
        for fn in module.functions.values():
            head, body = self.print_function(fn)
            protos.append(head + ";")
            bodies += ["", function_marker(fn.name), head + " {", *body, "}"]
        head = [f"/* generated by hidet-framework for target {self.target_kind}: module "
                f"{comment_text(module.name)} */", *self.preamble(module)]
        return "\n".join(head + ["", "/* prototypes */", *protos] + bodies) + "\n"

    def entry_kinds(self) -> tuple[str, ...]:
        return ("public", "cpu_kernel", "cuda_kernel")

    def print_function(self, fn: Function) -> tuple[str, list[str]]:
        self.function, self.names, self.lines, self.depth = fn, {}, [], 1
        self.scope = NameScope(self.global_names)
        params = []
        for p in fn.params:
            decl, prologue = self.param_decl(fn, p, self.bind(p))
            params.append(decl)
            self.lines += [self.INDENT + line for line in prologue]
        self.stmt(fn.body)
        quals = self.function_qualifiers(fn)
        head = f"{quals + ' ' if quals else ''}{self.type_name(fn.ret_type)} " \
               f"{self.func_names[fn.name]}({', '.join(params) or 'void'})"
        return head, self.lines

    # ------------------------------------------------------------------ names
    def bind(self, v: Var) -> str:
        """The C name of `v`, made on its first declaration (reused if redeclared)."""
        if v not in self.names:
            self.names[v] = self.scope.unique(v.hint or "v")
        return self.names[v]

    # -------------------------------------------------------------- statements
    def emit(self, line: str) -> None:
        self.lines.append(self.INDENT * self.depth + line)

    def block(self, header: str, body: Stmt | None, close: str = "}") -> None:
        self.emit(header + " {")
        self.depth += 1
        self.stmt(body)
        self.depth -= 1
        self.emit(close)

    def stmt(self, s: Stmt | None) -> None:
        if s is None:
            return
        method = _method_for(self, "stmt_", type(s))
        if method is None:
            raise CodegenError(f"{type(s).__name__} cannot be printed: lower the function first")
        method(s)

    def stmt_SeqStmt(self, s: SeqStmt) -> None:
        for st in s.stmts:
            self.stmt(st)

    def stmt_ForMappingStmt(self, s: Any) -> None:
        raise CodegenError("ForMappingStmt reached the code generator: run lowering.lower_task_mapping first")

    def stmt_DeclareStmt(self, s: Any) -> None:
        v, t = s.var, s.var.type
        name = self.bind(v)
        if isinstance(t, TensorType) and s.init is None:  # an array of the layout's size
            size = t.layout.size if t.layout is not None else math.prod(t.shape) if all(
                isinstance(d, int) for d in t.shape) else _product(t.shape)
            size_text = str(size) if isinstance(size, int) else self.expr(size)
            self.emit(f"{self.scope_prefix(s.scope)}{self.type_name(t.dtype)} {name}[{size_text}];")
            return
        # a tensor initialised from a pointer is that pointer
        prefix = "" if isinstance(t, (TensorType, PointerType)) else self.scope_prefix(s.scope)
        init = "" if s.init is None else " = " + self.store_value(s.init, t)
        self.emit(f"{prefix}{self.type_name(t)} {name}{init};")

    def stmt_BufferStoreStmt(self, s: Any) -> None:
        target = TensorElement(s.base, s.indices)
        self.emit(f"{self.storage(target)} = {self.store_value(s.value, infer_type(target))};")

    def stmt_AssignStmt(self, s: Any) -> None:
        self.emit(f"{self.name_of(s.var)} = {self.store_value(s.value, s.var.type)};")

    def stmt_LetStmt(self, s: LetStmt) -> None:
        self.emit("{")  # the bound names live exactly as long as the let's body
        self.depth += 1
        while isinstance(s, LetStmt):
            t = s.var.type
            value = self.store_value(s.value, t)
            decl = f"{self.type_name(t)} const" if isinstance(t, (PointerType, TensorType)) else \
                f"const {self.type_name(t)}"
            self.emit(f"{decl} {self.bind(s.var)} = {value};")
            s = s.body
        self.stmt(s)
        self.depth -= 1
        self.emit("}")

    def stmt_ForStmt(self, s: Any) -> None:
        for pragma in self.for_pragmas(s):
            self.emit(pragma)
        i = self.bind(s.var)
        extent = self.expr(s.extent, BINARY_PRECEDENCE["lt"] + 1)
        self.block(f"for ({self.type_name(s.var.type)} {i} = 0; {i} < {extent}; ++{i})", s.body)

    def stmt_WhileStmt(self, s: Any) -> None:
        self.block(f"while ({self.expr(s.cond)})", s.body)

    def stmt_BreakStmt(self, s: Any) -> None:
        self.emit("break;")

    def stmt_ContinueStmt(self, s: Any) -> None:
        self.emit("continue;")

    def stmt_IfStmt(self, s: IfStmt) -> None:
        header = f"if ({self.expr(s.cond)})"
        while True:
            if s.else_body is None:
                return self.block(header, s.then_body)
            self.block(header, s.then_body, close="}")
            self.lines[-1] += " else"
            if isinstance(s.else_body, IfStmt):  # else-if chains stay flat
                s = s.else_body
                header = self.lines.pop().strip() + f" if ({self.expr(s.cond)})"
                continue
            header = self.lines.pop().strip()
            return self.block(header, s.else_body)

    def stmt_EvaluateStmt(self, s: Any) -> None:
        self.emit(self.expr(s.expr) + ";")

    def stmt_ReturnStmt(self, s: Any) -> None:
        value = "" if s.value is None else " " + self.store_value(s.value, self.function.ret_type)
        self.emit(f"return{value};")

    def stmt_AssertStmt(self, s: Any) -> None:
        message = f"hidet assertion failed in {self.function.name}: {s.message or 'condition is false'}"
        self.emit(f"if (!{self.expr(s.cond, UNARY)}) {{")
        self.depth += 1
        for line in self.assert_failure(c_string_literal(message)):
            self.emit(line)
        self.depth -= 1
        self.emit("}")

    def stmt_AsmStmt(self, s: Any) -> None:
        outs = ", ".join(f"{c_string_literal(c)}({self.storage(x)})" for c, x in s.outputs)
        ins = ", ".join(f"{c_string_literal(c)}({self.expr(x)})" for c, x in s.inputs)
        clobbers = ", ".join(c_string_literal(c) for c in s.clobbers)
        keyword = self.ASM_KEYWORD if s.volatile else self.ASM_KEYWORD_NONVOLATILE
        self.emit(f"{keyword}({c_string_literal(s.template)} : {outs} : {ins} : {clobbers});")


def _product(shape: tuple) -> Expr:
    out = convert(shape[0])
    for d in shape[1:]:
        out = out * d
    return out


def function_marker(name: str) -> str:
    """The comment line that `function_at` finds: ``/* hidet function: NAME */``."""
    return f"/* hidet function: {comment_text(name)} */"


def function_at(lines: Sequence[str], line: int) -> str | None:
    """The name in the nearest ``/* hidet function: NAME */`` marker at or above `line`
    (1-based) of generated source, or None."""
    for index in range(min(line, len(lines)) - 1, -1, -1):
        match = _FUNCTION_MARKER.search(lines[index])
        if match:
            return match.group(1)
    return None


def source_excerpt(lines: Sequence[str], line: int, context: int = 3) -> str:
    """Lines ``line ± context`` (1-based) of generated source with their numbers, the
    offending one marked ``>``: what a compile error shows under the compiler's log."""
    lo, hi = max(1, line - context), min(len(lines), line + context)
    return "\n".join(f"{'>' if n == line else ' '} {n:5d} | {lines[n - 1]}" for n in range(lo, hi + 1))
