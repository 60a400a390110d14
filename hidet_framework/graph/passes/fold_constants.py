"""Evaluate at compile time every operator whose inputs are all constants, and use its
results as constants (weights reshaped or transposed once, not on every call).

The evaluation itself comes from the context (``ctx.evaluate``): the driver passes one
that compiles the task for the CPU, or runs the IR evaluator on tiny tasks
(``runtime.evaluate_task.interpret_task``); without one, nothing is folded. An operator
that cannot be evaluated stays in the graph, which is always correct.
"""
from __future__ import annotations

import numpy as np

from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.passes.base import GraphPassContext, Rebuilder
from hidet_framework.graph.tensor import constant


def fold_constants(graph: FlowGraph, ctx: GraphPassContext | None = None) -> FlowGraph:
    ctx = ctx or GraphPassContext()
    rebuild = Rebuilder()
    folded = skipped = 0
    for op in graph.nodes:
        op = rebuild.operator(op)
        if not all(t.is_constant() for t in op.inputs):
            continue
        results = None if ctx.evaluate is None else ctx.evaluate(op.task, [t.storage for t in op.inputs])
        if results is None:
            skipped += 1
            continue
        for out, value in zip(op.outputs, results):
            value = np.asarray(value)
            if value.shape != out.shape or value.dtype != np.dtype(out.dtype.numpy_name):
                raise RuntimeError(f"constant folding {op!r}: the evaluator returned "
                                   f"{value.dtype}{list(value.shape)} for {out!r}")
            rebuild.replace(out, constant(value, dtype=out.dtype, name=f"{out.name}_folded"))
        folded += 1
    ctx.record("fold_constants", folded=folded, not_evaluable=skipped)
    return rebuild.graph(graph)
