"""Compute each value once: operators with the same name, attributes, math and inputs
become one, and constants with the same dtype, shape and bytes become one.

Constants are merged first, so two operators reading two copies of the same weight
are recognised as the same computation.
"""
from __future__ import annotations

import hashlib

import numpy as np

from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.passes.base import GraphPassContext, Rebuilder, attributes_key
from hidet_framework.graph.tensor import Tensor


def _constant_key(t: Tensor) -> tuple:
    # Hashed as raw bytes through a uint8 view: memoryview() refuses dtypes without a
    # buffer-protocol code, such as ml_dtypes' bfloat16 ('E').
    data = np.ascontiguousarray(t.storage).reshape(-1).view(np.uint8)
    digest = hashlib.sha256(data).hexdigest()
    return (t.dtype.name, t.shape, digest)


def eliminate_common_subexpressions(graph: FlowGraph, ctx: GraphPassContext | None = None) -> FlowGraph:
    ctx = ctx or GraphPassContext()
    rebuild = Rebuilder()
    constants: dict[tuple, Tensor] = {}
    for t in graph.constants():
        rebuild.replace(t, constants.setdefault(_constant_key(t), t))
    seen: dict[tuple, object] = {}
    merged = 0
    for op in graph.nodes:
        op = rebuild.operator(op)
        key = (op.name, attributes_key(op.attributes), op.task.fingerprint(),
               tuple(t.uid for t in op.inputs))
        first = seen.setdefault(key, op)
        if first is not op:
            merged += 1
            for old, new in zip(op.outputs, first.outputs):
                rebuild.replace(old, new)
    ctx.record("eliminate_common_subexpressions", merged=merged,
               constants_merged=len(graph.constants()) - len(constants))
    return rebuild.graph(graph)
