"""A graph rewrite rule: ``rowsum(scale(x, a))`` -> ``scale(rowsum(x), a)``.

A rule is a ``RewriteRule`` (``hidet_framework.extension``; its point is
``points.GRAPH_REWRITE``): ``op_names`` (the operators the engine shows it) and
``rewrite(op)``, which returns replacement tensors for ``op.outputs`` (same shapes
and dtypes) or None to leave `op` alone. The engine runs
rules to a fixpoint before constant folding and fusion; the scale left without users
is then removed by dead-code elimination.
"""
from __future__ import annotations

from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Operator, Tensor

from hidet_plugin_rowops.operators import ROWSUM, SCALE, rowsum, scale


def sum_of_scaled(op: Operator) -> list[Tensor] | None:
    source = op.inputs[0].producer
    if source is None or source.name != SCALE:
        return None
    return [scale(rowsum(source.inputs[0]), source.attributes["factor"])]


SUM_OF_SCALED = RewriteRule("rowops.sum_of_scaled", (ROWSUM,), sum_of_scaled,
                            description="rowsum(scale(x, a)) as scale(rowsum(x), a): the scale on one value a row")
