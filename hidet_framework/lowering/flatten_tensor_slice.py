"""flatten_tensor_slice: accesses through tensor slices become accesses to the base.

    a[2:6, j][k]          ->  a[2 + k, j]
    a[1:, :][i, 2:][k]    ->  a[1 + i, 2 + k]       (slices of slices compose)
    f(a[i, :])            ->  f(&a[i, 0])           (a slice argument passes its first element)

A pointer-typed variable declared or bound to a slice gets the slice's first element's
address the same way. Slices exist for convenience in the DSL; after this pass the
indices of every access are explicit, so later passes (flattening, bounds checks,
fusion) see one kind of access only.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir.expr import Address, Call, Constant, Expr, TensorElement, TensorSlice, const
from hidet_framework.ir.func import Function
from hidet_framework.ir.functors import IRRewriter
from hidet_framework.ir.stmt import BufferStoreStmt, DeclareStmt, LetStmt
from hidet_framework.ir.types import PointerType
from hidet_framework.lowering.pass_base import FunctionPass


def _is_zero(e: Any) -> bool:
    return isinstance(e, Constant) and e.value == 0


def compose_indices(base: Expr, indices: tuple) -> tuple[Expr, tuple]:
    """The innermost non-slice base and the indices into it of ``base[indices]``."""
    while isinstance(base, TensorSlice):
        kept = iter(indices)
        full = []
        for fixed, start in zip(base.indices, base.starts):
            if fixed is not None:
                full.append(fixed)
            else:
                index = next(kept, None)
                if index is None:
                    raise ValueError(f"too few indices for slice {base}")
                full.append(index if start is None else start if _is_zero(index) else start + index)
        if next(kept, None) is not None:
            raise ValueError(f"too many indices for slice {base}")
        base, indices = base.base, tuple(full)
    return base, indices


def first_element(s: TensorSlice) -> TensorElement:
    """The element at the slice's origin (every kept dimension at its start)."""
    kept = sum(1 for fixed in s.indices if fixed is None)
    base, indices = compose_indices(s, (const(0),) * kept)
    return TensorElement(base, indices)


class _Flatten(IRRewriter):
    def visit_TensorElement(self, e: TensorElement) -> Expr:
        base, indices = self.visit(e.base), self.visit_seq(e.indices)
        if isinstance(base, TensorSlice):
            return TensorElement(*compose_indices(base, indices))
        return self._rebuild(e, base=base, indices=indices)

    def visit_BufferStoreStmt(self, s: BufferStoreStmt) -> Any:
        base, indices, value = self.visit(s.base), self.visit_seq(s.indices), self.visit(s.value)
        if isinstance(base, TensorSlice):
            base, indices = compose_indices(base, indices)
            return BufferStoreStmt(base, indices, value)
        return self._rebuild(s, base=base, indices=indices, value=value)

    def visit_Call(self, e: Call) -> Expr:
        args = tuple(self._as_address(self.visit(a)) for a in e.args)
        return self._rebuild(e, args=args if any(x is not y for x, y in zip(args, e.args)) else e.args)

    def visit_DeclareStmt(self, s: DeclareStmt) -> Any:
        init = self.visit(s.init)
        if isinstance(s.var.type, PointerType):
            init = self._as_address(init)
        return self._rebuild(s, init=init)

    def visit_LetStmt(self, s: LetStmt) -> Any:
        value = self.visit(s.value)
        if isinstance(s.var.type, PointerType):
            value = self._as_address(value)
        return self._rebuild(s, value=value, body=self.visit(s.body))

    @staticmethod
    def _as_address(e: Any) -> Any:
        return Address(first_element(e)) if isinstance(e, TensorSlice) else e


class FlattenTensorSlice(FunctionPass):
    name = "flatten_tensor_slice"

    def run_on_function(self, fn: Function, ctx: Any) -> Function:
        return _Flatten().visit(fn)
