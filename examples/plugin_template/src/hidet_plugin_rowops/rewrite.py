"""A graph rewrite rule: ``rowsum(scale(x, a))`` -> ``scale(rowsum(x), a)``.

A rule registered at ``points.GRAPH_REWRITE`` has ``op_names`` (the operators the
engine shows it) and ``rewrite(op)``, which returns replacement tensors for
``op.outputs`` (same shapes and dtypes) or None to leave `op` alone. The engine runs
rules to a fixpoint before constant folding and fusion; the scale left without users
is then removed by dead-code elimination.
"""
from __future__ import annotations

from typing import Any

import attrs

from hidet_framework.extension import points
from hidet_framework.graph import Operator, Tensor

from hidet_plugin_rowops.operators import ROWSUM, SCALE, rowsum, scale


def sum_of_scaled(op: Operator) -> list[Tensor] | None:
    source = op.inputs[0].producer
    if source is None or source.name != SCALE:
        return None
    return [scale(rowsum(source.inputs[0]), source.attributes["factor"])]


@attrs.frozen
class RewriteRule:
    name: str
    op_names: tuple
    rewrite: Any
    point: str = points.GRAPH_REWRITE


SUM_OF_SCALED = RewriteRule("rowops.sum_of_scaled", (ROWSUM,), sum_of_scaled)
