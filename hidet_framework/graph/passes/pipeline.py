"""The graph pass pipeline: which passes run, in which order, and why that order.

1. rewrite_patterns — plugins' rules first (conv2d → matmul etc.): what they create
   (weight reshapes/transposes) is then foldable.
2. fold_constants — operators over constants only become constants.
3. eliminate_common_subexpressions — merge equal constants and equal operators.
4. eliminate_dead_code — drop what the passes above disconnected.

Fusion's partition pass runs after these, once the graph is final; it belongs to the
fusion stage (``hidet_framework.fusion.FUSION_PASSES``), and whether it runs is the
driver's choice (``hf.compile(..., fusion=False)`` keeps one kernel per operator):
`GRAPH_PASSES` alone gives the unfused graph, ``GRAPH_PASSES + FUSION_PASSES`` the one
the driver compiles.
"""
from __future__ import annotations

from typing import Callable

from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.eliminate_common_subexpressions import eliminate_common_subexpressions
from hidet_framework.graph.passes.eliminate_dead_code import eliminate_dead_code
from hidet_framework.graph.passes.fold_constants import fold_constants
from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns

GraphPass = Callable[[FlowGraph, GraphPassContext], FlowGraph]

GRAPH_PASSES: list[GraphPass] = [
    rewrite_patterns,
    fold_constants,
    eliminate_common_subexpressions,
    eliminate_dead_code,
]


def run_graph_passes(graph: FlowGraph, ctx: GraphPassContext | None = None,
                     passes: list[GraphPass] | None = None) -> FlowGraph:
    """Run `passes` (default: `GRAPH_PASSES`) in order; the input graph is untouched."""
    ctx = ctx or GraphPassContext()
    for graph_pass in GRAPH_PASSES if passes is None else passes:
        graph = graph_pass(graph, ctx)
    return graph
