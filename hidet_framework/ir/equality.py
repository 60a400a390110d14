"""Structural equality and hashing of IR trees.

Two trees are structurally equal when they have the same node kinds, the same field
values, and their variables correspond one to one (a variable of one tree always meets
the same variable of the other; hints do not matter). `assert_structural_equal` names
the first path where they differ, e.g. ``body.stmts[1].value.b``.
"""
from __future__ import annotations

import hashlib
from typing import Any

import attrs

from hidet_framework.ir.expr import Node, Var
from hidet_framework.ir.types import PointerType, TensorType


class StructuralMismatch(AssertionError):
    """Raised by `assert_structural_equal`; `path` locates the first difference."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"IR differs at {path or '<root>'}: {detail}")
        self.path = path


class _Comparer:
    def __init__(self) -> None:
        self.a2b: dict[int, Var] = {}
        self.b2a: dict[int, Var] = {}

    def compare(self, a: Any, b: Any, path: str) -> None:
        if isinstance(a, Var) or isinstance(b, Var):
            return self.compare_var(a, b, path)
        if isinstance(a, (Node, TensorType, PointerType)):
            if type(a) is not type(b):
                raise StructuralMismatch(path, f"{type(a).__name__} vs {type(b).__name__}")
            for field in attrs.fields(type(a)):
                self.compare(getattr(a, field.name), getattr(b, field.name), _join(path, field.name))
            return None
        if isinstance(a, (tuple, list)):
            if not isinstance(b, (tuple, list)) or len(a) != len(b):
                raise StructuralMismatch(path, f"sequence {_short(a)} vs {_short(b)}")
            for k, (x, y) in enumerate(zip(a, b)):
                self.compare(x, y, f"{path}[{k}]")
            return None
        if hasattr(a, "items") and hasattr(b, "items"):
            if list(a.keys()) != list(b.keys()):
                raise StructuralMismatch(path, f"keys {list(a.keys())} vs {list(b.keys())}")
            for k in a:
                self.compare(a[k], b[k], f"{path}[{k!r}]")
            return None
        if type(a) is not type(b) or a != b:
            raise StructuralMismatch(path, f"{_short(a)} vs {_short(b)}")
        return None

    def compare_var(self, a: Any, b: Any, path: str) -> None:
        if not (isinstance(a, Var) and isinstance(b, Var)):
            raise StructuralMismatch(path, f"{_short(a)} vs {_short(b)}")
        mapped = self.a2b.get(id(a))
        if mapped is None and id(b) not in self.b2a:
            self.compare(a.type, b.type, _join(path, "type"))
            self.a2b[id(a)] = b
            self.b2a[id(b)] = a
        elif mapped is not b:
            raise StructuralMismatch(path, f"variable {a.hint!r} corresponds to another variable than {b.hint!r}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _short(x: Any) -> str:
    text = str(x)
    return text if len(text) < 80 else text[:77] + "..."


def assert_structural_equal(a: Any, b: Any) -> None:
    """Raise `StructuralMismatch` naming the first differing path."""
    _Comparer().compare(a, b, "")


def structural_equal(a: Any, b: Any) -> bool:
    try:
        assert_structural_equal(a, b)
    except StructuralMismatch:
        return False
    return True


def structural_hash(node: Any) -> str:
    """A hash equal for structurally equal trees (variables hashed by the order in
    which they first appear)."""
    numbering: dict[int, int] = {}
    h = hashlib.sha256()

    def feed(x: Any) -> None:
        if isinstance(x, Var):
            if id(x) not in numbering:
                numbering[id(x)] = len(numbering)
                h.update(b"newvar")
                feed(x.type)
            h.update(f"var{numbering[id(x)]};".encode())
        elif isinstance(x, (Node, TensorType, PointerType)):
            h.update(type(x).__name__.encode())
            for field in attrs.fields(type(x)):
                feed(getattr(x, field.name))
        elif isinstance(x, (tuple, list)):
            h.update(f"seq{len(x)}(".encode())
            for y in x:
                feed(y)
            h.update(b")")
        elif hasattr(x, "items"):
            for k, v in x.items():
                h.update(repr(k).encode())
                feed(v)
        else:
            h.update(f"{type(x).__name__}:{x!r};".encode())

    feed(node)
    return h.hexdigest()
