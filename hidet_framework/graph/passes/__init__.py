"""Graph passes: one pass per ``verb_noun.py``; the ordered list is in ``pipeline.py``.
Each pass is ``pass_(graph, ctx) -> FlowGraph`` and never mutates its input."""
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.eliminate_common_subexpressions import eliminate_common_subexpressions
from hidet_framework.graph.passes.eliminate_dead_code import eliminate_dead_code
from hidet_framework.graph.passes.fold_constants import fold_constants
from hidet_framework.graph.passes.pipeline import GRAPH_PASSES, GraphPass, run_graph_passes
from hidet_framework.graph.passes.rewrite_patterns import GraphRewriteError, REWRITE_POINT, rewrite_patterns
