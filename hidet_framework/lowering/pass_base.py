"""What a pass is. One pass per ``verb_noun.py`` module in this folder.

A `FunctionPass` rewrites one function at a time; a `ModulePass` sees the whole
module. Both are named (instruments and pipelines refer to them by name) and receive
the active pass context, whose config they may read (e.g. ``ctx.config["unroll"]``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hidet_framework.ir.func import Function, IRModule

if TYPE_CHECKING:
    from hidet_framework.lowering.pass_context import PassContext


class Pass:
    """Base of passes; subclasses set `name` and override `run`."""

    name: str = ""

    def run(self, module: IRModule, ctx: "PassContext") -> IRModule:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<pass {self.name}>"


class ModulePass(Pass):
    """A pass over the whole module."""


class FunctionPass(Pass):
    """A pass applied to every function of the module independently."""

    def run_on_function(self, fn: Function, ctx: "PassContext") -> Function:
        raise NotImplementedError

    def run(self, module: IRModule, ctx: "PassContext") -> IRModule:
        new = {name: self.run_on_function(fn, ctx) for name, fn in module.functions.items()}
        if all(new[k] is module.functions[k] for k in new):
            return module
        return module.with_functions(new)
