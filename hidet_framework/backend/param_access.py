"""What a compiled function may do to its array parameters, and how big they must be.

Two facts the call boundary needs that a C prototype does not carry:

- **Which arrays it may write.** A read-only numpy array (a broadcast view, a memory
  map opened read-only, ``a.setflags(write=False)``) must never reach a parameter the
  kernel stores into. :func:`written_params` over-approximates: a parameter counts as
  read-only only when every use of it is an element load (``a[i]`` outside any
  ``&...``); a store, an address taken, a slice, an alias or a call argument all count
  as writes, so nothing written is ever missed.
- **Extents named by scalar parameters** (``n: i32, a: f32[n]``). A C kernel indexes
  ``a`` up to ``n`` whatever was passed, so an ``n`` larger than the array reads and
  writes out of bounds. :func:`symbolic_extent` turns such an extent into a small
  expression over parameter positions (``"$0"``, ``"($0 * 2)"``: +, -, * of parameters
  and integer constants) that the runtime evaluates on the actual scalars and compares
  with the array's shape. Extents with division, or naming anything but a parameter,
  stay unchecked (None), as before.

Expressions are built from the IR only (parameter *positions*, never their names), and
:func:`parse_extent` re-validates a stored one against that grammar before any use.
"""
from __future__ import annotations

import ast
from typing import Any, Mapping, Sequence

from hidet_framework.ir.expr import Address, BinaryOp, Constant, TensorElement, Var
from hidet_framework.ir.functors import IRVisitor

__all__ = ["written_params", "symbolic_extent", "parse_extent", "extent_params", "evaluate_extent", "python_extent"]

_OPS = {"+": ast.Add, "-": ast.Sub, "*": ast.Mult}
_IR_OPS = {"add": "+", "sub": "-", "mul": "*"}  # IR BinaryOp names of the operators above


class _ParamUses(IRVisitor):
    def __init__(self, params: Sequence[Var]) -> None:
        self.params = {id(p): p for p in params}
        self.written: set[int] = set()
        self.in_address = 0

    def visit_TensorElement(self, e: TensorElement) -> None:
        if isinstance(e.base, Var) and id(e.base) in self.params and not self.in_address:
            self.visit_seq(e.indices)  # a plain element load: not a write
            return
        super().visit_TensorElement(e)

    def visit_Address(self, e: Address) -> None:
        self.in_address += 1
        try:
            super().visit_Address(e)
        finally:
            self.in_address -= 1

    def visit_Var(self, e: Var) -> None:
        if id(e) in self.params:  # any use but an element load may write through it
            self.written.add(id(e))


def written_params(fn: Any) -> set[int]:
    """``id()`` of the parameters of IR function `fn` that it may write through."""
    uses = _ParamUses(fn.params)
    uses.visit(fn.body)
    return uses.written


def symbolic_extent(extent: Any, params: Sequence[Var]) -> str | None:
    """The extent as an expression over parameter positions, or None when it is not
    one the runtime can check (see the module docstring)."""
    position = {id(p): k for k, p in enumerate(params)}

    def text(e: Any) -> str | None:
        if isinstance(e, Var):
            k = position.get(id(e))
            return None if k is None else f"${k}"
        if isinstance(e, Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
            return str(e.value) if e.value >= 0 else f"(0 - {-e.value})"
        if isinstance(e, BinaryOp) and e.op in _IR_OPS:
            a, b = text(e.a), text(e.b)
            return None if a is None or b is None else f"({a} {_IR_OPS[e.op]} {b})"
        return None

    return text(extent)


def parse_extent(expr: str, n_params: int) -> ast.expr:
    """The checked syntax tree of a stored extent expression; ValueError when it is not
    exactly the grammar :func:`symbolic_extent` produces."""
    if not isinstance(expr, str) or len(expr) > 1000:
        raise ValueError(f"not an extent expression: {expr!r}")
    tree = ast.parse(expr.replace("$", "p_"), mode="eval").body

    def check(node: ast.AST) -> None:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS.values():
            check(node.left)
            check(node.right)
        elif isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
            pass
        elif isinstance(node, ast.Name) and node.id.startswith("p_") and node.id[2:].isdigit() \
                and int(node.id[2:]) < n_params:
            pass
        else:
            raise ValueError(f"not an extent expression: {expr!r}")

    check(tree)
    return tree


def extent_params(tree: ast.expr) -> set[int]:
    """Positions of the parameters a parsed extent expression names."""
    return {int(n.id[2:]) for n in ast.walk(tree) if isinstance(n, ast.Name)}


def evaluate_extent(expr: str, args: Sequence[Any]) -> int:
    """The value of a stored extent expression for the call's arguments."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.BinOp):
            a, b = value(node.left), value(node.right)
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        if isinstance(node, ast.Constant):
            return node.value
        return int(args[int(node.id[2:])])  # type: ignore[attr-defined]

    return value(parse_extent(expr, len(args)))


def python_extent(expr: str, n_params: int, names: Mapping[int, str]) -> str:
    """The extent as Python source over the caller's argument names (for the generated
    fast path); only after :func:`parse_extent` accepted it."""
    parse_extent(expr, n_params)
    out = expr
    for k in sorted(names, reverse=True):  # $12 before $1
        out = out.replace(f"${k}", names[k])
    return out
