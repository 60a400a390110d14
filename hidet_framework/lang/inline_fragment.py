"""Script functions used as pieces of another kernel's body, written in place.

Kernels that share one loop skeleton differ in what runs at a few points of it (how a
panel is packed, what a worker does before its share). A ``device`` function called
there would change the generated code (a call where the loop was) and keep those loops
out of the kernel, where fusion must find the operand reads (docs/design.md, Fusion).
So each such piece is a script function wrapped by `inline_fragment`: called while the
skeleton is traced, it is a host helper that returns a statement (docs/dsl.md,
Statements and Inline fragments), its traced body with its parameters replaced by the
arguments, which the tracer emits where the call stands. The result is the code the
skeleton would have had with the piece written in place.

    @inline_fragment
    @script
    def pack_b_panel(b: bf16[ops.b_shape], bpack: bf16[size], bi: i32, col0: i32, dst: i32):
        ...                                  # traced once, here, with this closure

    # in the skeleton's @script body:
    pack_b_panel(b, bpack, bi, col0, dst)    # its body, with b -> the kernel's b, ...

A fragment's local variables are those of its own trace, so it is written into one
kernel once (a second use would declare the same variables twice); builders make
fresh fragments for every kernel they build.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import convert
from hidet_framework.ir.functors import substitute
from hidet_framework.ir.stmt import Stmt
from hidet_framework.ir.type_infer import infer_type

__all__ = ["InlineFragment", "inline_fragment"]


class InlineFragment:
    """A traced script function (`ScriptFunction`) whose body is written where it is
    called, once; never a function of the generated module."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self.written = False
        self.__name__ = function.name   # how the tracer names the callee in its errors

    def __repr__(self) -> str:
        return f"InlineFragment({self.name})"

    @property
    def name(self) -> str:
        return self.function.name

    def __call__(self, *args: Any) -> Stmt:
        params = self.function.ir.params
        if len(args) != len(params):
            raise TypeError(f"fragment {self.name} takes {len(params)} argument(s), got {len(args)}")
        if self.written:
            raise RuntimeError(f"fragment {self.name} is already written into a kernel; build a fresh one")
        mapping = {}
        for param, arg in zip(params, args):
            value = convert(arg)
            if isinstance(param.type, DataType) and infer_type(value) != param.type:
                # in place, no conversion would happen: a mismatch is a mistake, not a cast
                raise TypeError(f"fragment {self.name}: {param.hint} is {param.type}, got {infer_type(value)}")
            mapping[param] = value
        self.written = True
        return substitute(self.function.ir.body, mapping)


def inline_fragment(function: Any) -> InlineFragment:
    """Decorator (over ``@script``): the script function as an `InlineFragment`."""
    return InlineFragment(function)
