"""Drop operators no graph output depends on.

A FlowGraph lists only the operators reachable from its outputs, so rebuilding it
from its inputs and outputs is the whole pass: operators a rewrite or a fold
disconnected fall out here, and the count is recorded for the report.
"""
from __future__ import annotations

from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.passes.base import GraphPassContext


def eliminate_dead_code(graph: FlowGraph, ctx: GraphPassContext | None = None) -> FlowGraph:
    ctx = ctx or GraphPassContext()
    new = FlowGraph(graph.inputs, graph.outputs)
    ctx.record("eliminate_dead_code", removed=len(graph.nodes) - len(new.nodes))
    return new
