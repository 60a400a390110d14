"""Prologue: graft an injective producer onto a kernel's input loads.

Every element read ``a[indices]`` of the parameter bound to the producer's output
becomes the producer's value at ``indices`` — its inlined definition with its axes
replaced by `indices` — reading the producer's own inputs, which become new
parameters. The producer is recomputed per read; for an injective task that is cheap
compared with writing and re-reading the intermediate tensor, and a read the template
predicates away (``a[i] if i < m else 0``) is never computed.
"""
from __future__ import annotations

from typing import Hashable, Sequence

from hidet_framework.compute.definitions import contains_reduce, substitute_compute
from hidet_framework.compute.task import Task
from hidet_framework.fusion.bound_kernel import BoundKernel, check_param_uses, tensor_param
from hidet_framework.fusion.plan import FusionError
from hidet_framework.ir.expr import Expr, TensorElement, Var
from hidet_framework.ir.functors import IRRewriter


class _ReplaceReads(IRRewriter):
    def __init__(self, param: Var, value_at) -> None:
        self.param, self.value_at = param, value_at

    def visit_TensorElement(self, e: TensorElement) -> Expr:
        if e.base is self.param:
            return self.value_at(self.visit_seq(e.indices))
        return super().visit_TensorElement(e)


def graft_producer(kernel: BoundKernel, key: Hashable, producer: Task, input_keys: Sequence[Hashable]) -> int:
    """Replace the reads of buffer `key` (the single output of `producer`) in every
    function of `kernel`; `input_keys[k]` is the buffer of ``producer.inputs[k]``.
    Returns how many parameters were grafted (0: no function reads `key`)."""
    if len(producer.outputs) != 1 or not producer.is_injective():
        raise FusionError(f"producer {producer.name!r} is not a single-output injective task")
    out = producer.outputs[0]
    value = producer.inlined_value(out)
    if contains_reduce(value):
        raise FusionError(f"producer {producer.name!r} reduces")
    sites = kernel.sites(key)
    for fname, param in sites:
        fn = kernel.functions[fname]
        check_param_uses(fn, param, "read", out.shape)
        new_params = [tensor_param(f"{t.name}_{producer.name}", t.dtype, t.shape) for t in producer.inputs]
        inputs = dict(zip(producer.inputs, new_params))

        def value_at(indices: tuple, _inputs=inputs) -> Expr:
            mapping: dict = dict(zip(out.definition.axes, indices))
            mapping.update(_inputs)
            return substitute_compute(value, mapping)

        body = _ReplaceReads(param, value_at).visit(fn.body)
        kernel.update(fname, body, drop=param, add=list(zip(new_params, input_keys)))
    return len(sites)
