"""Lower ``for vars in mapping.on(worker)`` to loops and index arithmetic.

Every `ForMappingStmt` (nested ones included, innermost first) becomes
``mapping.lower(worker, vars, body)``: ``for`` loops over the repeat factors,
divisions and modulos of the worker index for the spatial factors, and the task
variables bound with ``LetStmt``. Workers beyond ``mapping.num_workers`` run nothing
(an ``if worker < num_workers`` guard) unless the pass is told the workers are in
range, or the worker is a constant.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hidet_framework.ir.func import Function
from hidet_framework.ir.functors import IRRewriter
from hidet_framework.ir.stmt import ForMappingStmt, Stmt
from hidet_framework.lowering.pass_base import FunctionPass

if TYPE_CHECKING:
    from hidet_framework.lowering.pass_context import PassContext


class _ForMappingLowerer(IRRewriter):
    def __init__(self, workers_in_range: bool, unroll: Any) -> None:
        self.workers_in_range = workers_in_range
        self.unroll = unroll

    def visit_ForMappingStmt(self, s: ForMappingStmt) -> Stmt:
        body = self.visit(s.body)
        worker = self.visit(s.worker)
        return s.mapping.lower(worker, s.vars, body, self.workers_in_range, self.unroll)


class LowerTaskMapping(FunctionPass):
    """Replace every `ForMappingStmt` by its lowered loops.

    :param workers_in_range: promise that every worker index is below the mapping's
        worker count (e.g. the block has exactly that many threads), dropping guards.
    :param unroll: the ``unroll`` hint of the repeat loops (default: unroll fully, so
        register tiles indexed by them stay in registers; ``unroll_loops`` caps it).
    """

    name = "lower_task_mapping"

    def __init__(self, workers_in_range: bool = False, unroll: Any = True) -> None:
        self.workers_in_range = workers_in_range
        self.unroll = unroll

    def run_on_function(self, fn: Function, ctx: "PassContext | None") -> Function:
        return _ForMappingLowerer(self.workers_in_range, self.unroll).visit(fn)


# The name the pass's tests and early callers used; the class follows the other passes'
# naming (FlattenTensorIndex, SimplifyExpr...).
LowerTaskMappingPass = LowerTaskMapping
