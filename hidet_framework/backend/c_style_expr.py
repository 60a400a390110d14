"""Expression printing shared by the C-style code generators: C precedence, exact
literals, storage types whose arithmetic happens in another type, and escaping of free
text. `CStyleCodegen` (``c_style.py``) builds on `CExprPrinter`; the override points
are listed there.
"""
from __future__ import annotations

import math
import re
from typing import Any

from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import (
    BINARY_OPS, UNARY_OPS, Address, BinaryOp, Call, Cast, Constant, Dereference, Expr, TensorElement, Var,
    convert,
)
from hidet_framework.ir.primitives import lookup_primitive
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import TensorType

__all__ = ["CExprPrinter", "CodegenError", "c_string_literal", "comment_text", "is_raw_read", "PRIMARY", "UNARY", "TERNARY"]


class CodegenError(ValueError):
    """The IR cannot be printed for this target (not lowered, unsupported, unknown name)."""


# C operator precedence (higher binds tighter); every printed expression carries one so
# parentheses appear exactly where C needs them (plus where gcc warns that a reader
# would misread: `a & b == c`, `a || b && c`).
PRIMARY, UNARY, TERNARY = 16, 14, 3
BINARY_PRECEDENCE = {
    "mul": 13, "div": 13, "mod": 13, "add": 12, "sub": 12, "shl": 11, "shr": 11,
    "lt": 10, "le": 10, "eq": 9, "ne": 9, "bit_and": 8, "bit_xor": 7, "bit_or": 6, "and": 5, "or": 4,
}
_BITWISE = {"bit_and", "bit_xor", "bit_or", "shl", "shr"}
_COMPARE = {"lt", "le", "eq", "ne"}
_WIDE_INT_BITS = 32  # C computes narrower integers as int: results are cast back


def c_string_literal(text: str) -> str:
    """A C string literal for any text: UTF-8 bytes, anything but plain printable ASCII
    as 3-digit octal escapes (``?`` too: trigraphs are on under -std=c11)."""
    out = []
    for b in text.encode("utf-8", "surrogatepass"):
        ch = chr(b)
        out.append(ch if 32 <= b < 127 and ch not in '"\\?' else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def comment_text(text: str) -> str:
    """Text safe inside ``/* ... */``: printable ASCII only, no comment delimiters."""
    text = "".join(c if 32 <= ord(c) < 127 else f"\\u{ord(c):04x}" for c in text)
    return text.replace("*/", "*\\/").replace("/*", "/\\*")


def _show(node: Any) -> str:
    """A node for an error message; never fails (the printer may not handle half-built IR)."""
    try:
        return str(node)
    except Exception:  # noqa: BLE001 - an error message must not raise another error
        return type(node).__name__


def is_raw_read(e: Expr) -> bool:
    return isinstance(e, (Var, TensorElement, Dereference))

class CExprPrinter:
    """Prints expressions as ``(text, precedence)``. Expects the generator state of
    `CStyleCodegen`: ``names`` (Var → C name), ``func_names``, ``module``, ``function``
    and ``type_name``."""

    target_kind = "c"
    names: dict
    func_names: dict

    # float16/bfloat16 values are stored in their own type and computed in float. Per
    # backend: the C text that widens a stored value ({0}: the value, already a primary
    # expression) and the text that rounds a float for storage.
    HALF_TO_FLOAT: dict = {}
    FLOAT_TO_HALF: dict = {}

    def load_value(self, text: str, prec: int, t: Any) -> tuple[str, int]:
        """A value read from storage of type `t`, as used in arithmetic."""
        if t in self.HALF_TO_FLOAT:
            return self.HALF_TO_FLOAT[t].format(text if prec >= PRIMARY else f"({text})"), PRIMARY
        return text, prec

    def store_value(self, value: Expr, t: Any) -> str:
        """`value` converted for storage of type `t` (assignment, argument, return)."""
        if t not in self.FLOAT_TO_HALF:
            return self.expr(value, TERNARY)
        if is_raw_read(value) and infer_type(value) is t:  # a plain copy: no round trip
            return self.storage(value)
        if isinstance(value, Cast) and value.dtype is t:  # the store rounds anyway
            value = value.expr
        return self.FLOAT_TO_HALF[t].format(self.expr(value, TERNARY))

    def cast_value(self, e: Expr, t: Any) -> tuple[str, int]:
        if t in self.FLOAT_TO_HALF:  # round to half, keep computing in float
            return self.HALF_TO_FLOAT[t].format(self.FLOAT_TO_HALF[t].format(self.expr(e, TERNARY))), PRIMARY
        return f"({self.type_name(t)}){self.expr(e, UNARY)}", UNARY

    def min_max(self, op: str, t: DataType, a: str, b: str) -> str:
        raise CodegenError(f"{self.target_kind}: no {op} for {t}")

    def float_literal(self, value: float, t: DataType) -> tuple[str, int]:
        """Exact literal: the shortest decimal that reads back to the same value."""
        single = t.name != "float64"
        if t.name in ("float16", "bfloat16") and math.isfinite(value):  # the value the type holds
            value = _round_half(value, t.name)
        if math.isnan(value):
            return ("NAN", PRIMARY) if single else ("(double)NAN", UNARY)
        if math.isinf(value):
            text = "INFINITY" if single else "(double)INFINITY"
            return (text, PRIMARY if single and value > 0 else UNARY) if value > 0 else ("-" + text, UNARY)
        if single:
            import numpy as np

            v = np.float32(value)
            text = next(s for p in range(6, 10) if np.float32(s := "%.*g" % (p, v)) == v)
        else:
            text = repr(float(value))
        if not any(c in text for c in ".e"):
            text += ".0"
        text += "f" if single else ""
        return text, UNARY if text.startswith("-") else PRIMARY

    def name_of(self, v: Var) -> str:
        try:
            return self.names[v]
        except KeyError:
            raise CodegenError(f"function {self.function.name!r}: variable {v.hint!r} is used but never "
                               f"declared (not a parameter, declaration, let or loop variable)") from None

    # ------------------------------------------------------------- expressions
    def expr(self, e: Expr, min_prec: int = 0) -> str:
        text, prec = self.visit_expr(e)
        return f"({text})" if prec < min_prec else text

    def visit_expr(self, e: Expr) -> tuple[str, int]:
        if not isinstance(e, Expr):  # indices built by hand may be plain Python numbers
            e = convert(e)
        method = _method_for(self, "expr_", type(e))
        if method is None:
            raise CodegenError(f"{type(e).__name__} cannot be printed: lower the function first ({_show(e)})")
        return method(e)

    def storage(self, e: Expr) -> str:
        """The lvalue text of a variable, tensor element or dereference (no conversion)."""
        if isinstance(e, Var):
            return self.name_of(e)
        if isinstance(e, TensorElement):
            t = infer_type(e.base)
            offset = self.flat_offset(t, e.indices)
            return f"{self.expr(e.base, PRIMARY)}[{self.expr(offset)}]"
        if isinstance(e, Dereference):
            return "*" + self.expr(e.ptr, UNARY)
        raise CodegenError(f"not an lvalue: {_show(e)}")

    def flat_offset(self, t: Any, indices: tuple) -> Expr:
        if len(indices) == 1:
            return indices[0]
        if not isinstance(t, TensorType):
            raise CodegenError(f"a pointer takes one index, got {len(indices)}")
        if len(indices) != t.rank:
            raise CodegenError(f"tensor of rank {t.rank} indexed with {len(indices)} indices")
        if t.layout is not None:  # the layout maps indices to the element offset
            return t.layout(*indices)
        offset = indices[0]  # row-major
        for extent, i in zip(t.shape[1:], indices[1:]):
            offset = offset * extent + i
        return offset

    def expr_Constant(self, e: Constant) -> tuple[str, int]:
        t = e.dtype
        if t.lanes > 1:
            raise CodegenError(f"vector constants are not supported: {_show(e)}")
        if t.is_bool():
            return ("true" if e.value else "false"), PRIMARY
        if t.is_float():
            return self.float_literal(float(e.value), t)
        v = int(e.value)
        if t.name == "int32":
            return (str(v), PRIMARY if v >= 0 else UNARY) if v != -(2**31) else ("(-2147483647 - 1)", PRIMARY)
        if t.name == "int64":
            if v == -(2**63):
                return "(-9223372036854775807LL - 1)", PRIMARY
            return f"{v}LL", PRIMARY if v >= 0 else UNARY
        if t.name in ("uint32", "uint64"):
            return f"{v}{'U' if t.bits == 32 else 'ULL'}", PRIMARY
        return f"({self.type_name(t)}){v}", UNARY

    def expr_Var(self, e: Var) -> tuple[str, int]:
        return self.load_value(self.name_of(e), PRIMARY, e.type)

    def expr_TensorElement(self, e: TensorElement) -> tuple[str, int]:
        return self.load_value(self.storage(e), PRIMARY, infer_type(e))

    def expr_Dereference(self, e: Dereference) -> tuple[str, int]:
        return self.load_value(self.storage(e), UNARY, infer_type(e))

    def expr_Address(self, e: Address) -> tuple[str, int]:
        return "&" + self.storage(e.expr), UNARY

    def expr_Cast(self, e: Cast) -> tuple[str, int]:
        return self.cast_value(e.expr, e.dtype)

    def expr_IfThenElse(self, e: Any) -> tuple[str, int]:
        return (f"{self.expr(e.cond, TERNARY + 1)} ? {self.expr(e.then_expr, TERNARY + 1)} : "
                f"{self.expr(e.else_expr, TERNARY)}"), TERNARY

    def expr_UnaryOp(self, e: Any) -> tuple[str, int]:
        operand = self.expr(e.a, UNARY)
        if operand[:1] in "-~!" and operand[:1] == UNARY_OPS[e.op]:
            operand = f"({operand})"  # `- -x`, never `--x`
        return self.narrow(f"{UNARY_OPS[e.op]}{operand}", UNARY, infer_type(e), e.op != "not")

    def expr_BinaryOp(self, e: BinaryOp) -> tuple[str, int]:
        t = infer_type(e)
        if e.op in ("min", "max"):
            return self.min_max(e.op, t, self.expr(e.a), self.expr(e.b)), PRIMARY
        prec = BINARY_PRECEDENCE[e.op]
        # The right operand needs a higher precedence (left associativity), by position: an
        # identity test (`x is e.b`) also parenthesised the left one when both were one object,
        # so the text depended on sharing, which the simplifier's shape memo introduces.
        a, b = self.operand(e.op, e.a, prec), self.operand(e.op, e.b, prec + 1)
        return self.narrow(f"{a} {BINARY_OPS[e.op][0]} {b}", prec, t, not BINARY_OPS[e.op][1])

    def operand(self, op: str, child: Expr, min_prec: int) -> str:
        text, prec = self.visit_expr(child)
        child_op = child.op if isinstance(child, BinaryOp) and child.op in BINARY_PRECEDENCE else None
        clarify = child_op is not None and child_op != op and (
            (op in _BITWISE) or (op == "or" and child_op == "and") or (op in _COMPARE and child_op in _COMPARE))
        return f"({text})" if prec < min_prec or clarify else text

    def narrow(self, text: str, prec: int, t: Any, arithmetic: bool) -> tuple[str, int]:
        """C computes integers narrower than int as int; cast back so results wrap like the IR."""
        if arithmetic and isinstance(t, DataType) and t.lanes == 1 and (
                t.is_bool() or t.is_integer() and t.bits < _WIDE_INT_BITS):  # bool + bool is a bool in the IR
            return f"({self.type_name(t)})({text})", UNARY
        return text, prec

    def expr_Call(self, e: Call) -> tuple[str, int]:
        if e.func in self.func_names:
            callee = self.module.functions[e.func]
            if len(e.args) != len(callee.params):
                raise CodegenError(f"{e.func!r} takes {len(callee.params)} arguments, got {len(e.args)}")
            args = ", ".join(self.store_value(a, p.type) for a, p in zip(e.args, callee.params))
            return self.load_value(f"{self.func_names[e.func]}({args})", PRIMARY, callee.ret_type)
        prim = lookup_primitive(e.func)
        if prim is None:
            raise CodegenError(f"call to unknown function {e.func!r}: neither a function of module "
                               f"{self.module.name!r} nor a registered primitive")
        template = prim.emit.get(self.target_kind)
        if template is None:
            raise CodegenError(f"primitive {e.func!r} has no {self.target_kind!r} implementation "
                               f"(it has: {', '.join(sorted(prim.emit)) or 'none'})")
        args = [self.expr(a, 0 if _delimited(template, i) else PRIMARY) for i, a in enumerate(e.args)]
        return template.format(*args), PRIMARY if _is_primary(template) else 0


def _round_half(value: float, name: str) -> float:
    import numpy as np

    if name == "float16":
        return float(np.float16(value))
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # nearest even
    return float(np.array(bits & 0xFFFFFFFF, dtype=np.uint32).view(np.float32))


def _delimited(template: str, index: int) -> bool:
    """Whether every ``{index}`` in a primitive's template stands alone as a call
    argument (between ``(``/``,`` and ``,``/``)``), so it needs no parentheses."""
    hits = re.findall(r"(\S?)\s*\{" + str(index) + r"\}\s*(\S?)", template)
    return bool(hits) and all(before and before in "(," and after and after in ",)" for before, after in hits)


def _is_primary(template: str) -> bool:
    """Whether a template prints as one primary expression: a name, ``a.b``, or a
    single call ``f(...)`` whose first ``(`` closes at the very end."""
    if re.fullmatch(r"[A-Za-z_][\w.]*", template):
        return True
    m = re.match(r"[A-Za-z_][\w.]*\(", template)
    if not m or not template.endswith(")"):
        return False
    depth = 0
    for pos in range(m.end() - 1, len(template)):
        depth += {"(": 1, ")": -1}.get(template[pos], 0)
        if depth == 0:
            return pos == len(template) - 1
    return False


def _method_for(printer: object, prefix: str, cls: type):
    """The printer method for a node class or its nearest base (so subclasses defined
    above the IR, like compute's TensorNode, print as the IR node they extend)."""
    for base in cls.__mro__:
        method = getattr(printer, prefix + base.__name__, None)
        if method is not None:
            return method
    return None
