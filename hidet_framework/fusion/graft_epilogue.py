"""Epilogue: graft a bijective consumer onto a kernel's output stores.

A consumer ``y = f(x, other...)`` that is a bijection from `x` to `y` (elementwise,
a permutation, a reshape: ``Task.inverse_map``) lets each store ``x[idx] = v`` become
``y[inv(idx)] = f(...)`` evaluated at the output index ``inv(idx)``, with the read of
``x`` (one element, read once or more) replaced by `v` (bound once) and the other
inputs (a bias, a residual) read at that index through new parameters. Every element of `y` is stored exactly when the
kernel stored the matching element of `x`, so nothing else about the kernel changes.
"""
from __future__ import annotations

from typing import Hashable, Sequence

from hidet_framework.compute.definitions import ComputeRewriter, GridCompute, TensorNode, substitute_compute
from hidet_framework.compute.task import InverseMap, Task
from hidet_framework.fusion.bound_kernel import BoundKernel, check_param_uses, tensor_param
from hidet_framework.fusion.plan import FusionError
from hidet_framework.ir.equality import structural_equal
from hidet_framework.ir.expr import Expr, TensorElement, Var, cast, var
from hidet_framework.ir.functors import IRRewriter, substitute
from hidet_framework.ir.stmt import BufferStoreStmt, LetStmt
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import TensorType


class _HoleForRead(ComputeRewriter):
    """Replaces the reads of `tensor` by `hole`, collecting their indices."""

    def __init__(self, tensor: TensorNode, hole: Var) -> None:
        self.tensor, self.hole = tensor, hole
        self.reads: list[TensorElement] = []

    def visit_TensorElement(self, e: TensorElement) -> Expr:
        if e.base is self.tensor:
            self.reads.append(e)
            return self.hole
        return super().visit_TensorElement(e)


def epilogue_form(consumer: Task, index: int) -> tuple[InverseMap, Expr, Var]:
    """What grafting `consumer` onto a store needs: the inverse map of input `index`,
    and the output value with every read of that input replaced by a variable (the
    hole). The reads must all be of one element (``x * erf(x)`` reads ``x[i]`` twice);
    FusionError otherwise, or when the input is not a bijection onto the output."""
    node, out = consumer.inputs[index], consumer.outputs[0]
    hole = var("fused_in", node.dtype)
    rewriter = _HoleForRead(node, hole)
    value = rewriter.visit(consumer.inlined_value(out))
    reads = rewriter.reads
    # the output's axes head both lists, so each must meet itself: x[i, j] and x[j, i]
    # are equal up to renaming, not the same element
    axes = list(out.definition.axes)
    if not reads or any(not structural_equal(axes + list(r.indices), axes + list(reads[0].indices))
                        for r in reads[1:]):
        raise FusionError(f"consumer {consumer.name!r} does not read one element of input {index} per output element")
    inverse = consumer.inverse_map(node)
    if inverse is None and len(reads) > 1:
        # Task.inverse_map detects permutations from a single read; several reads of
        # one element are the same case: ask it about a task with that one read.
        single = TensorNode(out.name, TensorType(node.dtype, out.shape), GridCompute(out.definition.axes, reads[0]))
        inverse = Task(consumer.name, [node], [single]).inverse_map(node)
    if inverse is None:
        raise FusionError(f"consumer {consumer.name!r} is not a bijection from input {index} to its output")
    return inverse, value, hole


class _ReplaceStores(IRRewriter):
    def __init__(self, param: Var, store_at) -> None:
        self.param, self.store_at = param, store_at

    def visit_BufferStoreStmt(self, s: BufferStoreStmt):
        if s.base is self.param:
            return self.store_at(self.visit_seq(s.indices), self.visit(s.value))
        return super().visit_BufferStoreStmt(s)


def _as_dtype(value: Expr, dtype) -> Expr:
    try:
        same = infer_type(value) is dtype
    except Exception:  # a node the type inference does not know: make the type explicit
        same = False
    return value if same else cast(value, dtype)


def graft_consumer(kernel: BoundKernel, key: Hashable, consumer: Task, index: int,
                   input_keys: Sequence[Hashable], output_key: Hashable) -> int:
    """Replace the stores into buffer `key` (read by `consumer` as its input `index`)
    in every function of `kernel` by stores into `output_key` (the consumer's single
    output); `input_keys[k]` is the buffer of ``consumer.inputs[k]`` (ignored for
    `index`). Returns how many parameters were grafted."""
    if len(consumer.outputs) != 1 or not consumer.is_injective():
        raise FusionError(f"consumer {consumer.name!r} is not a single-output injective task")
    node, out = consumer.inputs[index], consumer.outputs[0]
    inverse, value, hole = epilogue_form(consumer, index)
    sites = kernel.sites(key)
    if not sites:
        raise FusionError(f"no function of {kernel.name!r} writes the buffer {consumer.name!r} reads")
    for fname, param in sites:
        fn = kernel.functions[fname]
        check_param_uses(fn, param, "write", node.shape)
        out_param = tensor_param(f"{out.name}_{consumer.name}", out.dtype, out.shape)
        others = [(k, t) for k, t in enumerate(consumer.inputs) if k != index]
        extra = {t: tensor_param(f"{t.name}_{consumer.name}", t.dtype, t.shape) for _, t in others}

        def store_at(indices: tuple, stored: Expr, _extra=extra, _out=out_param) -> LetStmt:
            element = var("fused_v", node.dtype)
            out_indices = [substitute(e, dict(zip(inverse.axes, indices))) for e in inverse.out_indices]
            mapping: dict = dict(zip(out.definition.axes, out_indices))
            mapping.update(_extra)
            mapping[hole] = element
            result = _as_dtype(substitute_compute(value, mapping), out.dtype)
            return LetStmt(element, _as_dtype(stored, node.dtype), BufferStoreStmt(_out, out_indices, result))

        body = _ReplaceStores(param, store_at).visit(fn.body)
        kernel.update(fname, body, drop=param, replace_with=(out_param, output_key),
                      add=[(extra[t], input_keys[k]) for k, t in others])
    return len(sites)
