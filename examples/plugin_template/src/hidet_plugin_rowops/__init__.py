"""hidet-plugin-rowops: the example plugin of docs/plugins.md.

It contributes, through the ``hidet_framework`` entry point declared in pyproject.toml:

- two operators, ``rowops.rowsum`` (a reduction: the sum of each row of a 2-D
  tensor) and ``rowops.scale`` (elementwise multiplication by a constant), reached as
  ``hf.ops.rowops.rowsum`` or ``hf.ops["rowops.rowsum"]``;
- a CPU schedule template for ``rowops.rowsum`` (``RowsumTemplate``): where a
  template serves an operator on a target, the tuner measures its candidates and keeps
  the fastest (elsewhere, e.g. on cuda, the rule-based auto-scheduler runs it);
- a graph rewrite rule at ``points.GRAPH_REWRITE``: ``rowsum(scale(x, a))`` becomes
  ``scale(rowsum(x), a)`` (one multiplication per row instead of one per element).

Hooks import their modules lazily, so loading the plugin costs nothing until the core
asks for its registrations.
"""
from hidet_framework.extension import hookimpl


@hookimpl
def register_operators(register):
    from hidet_plugin_rowops.operators import rowsum, scale

    register("rowops.rowsum", rowsum)
    register("rowops.scale", scale)


@hookimpl
def register_templates(register):
    from hidet_plugin_rowops.rowsum_template import RowsumTemplate

    register("rowops.rowsum_cpu", RowsumTemplate())


@hookimpl
def register_passes(register):
    from hidet_plugin_rowops.rewrite import SUM_OF_SCALED

    register("rowops.sum_of_scaled", SUM_OF_SCALED)
