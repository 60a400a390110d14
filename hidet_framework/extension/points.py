"""The pipeline points where plugin passes run: the one list of their names.

A pass a plugin registers through ``register_passes`` carries a ``point`` attribute,
one of the constants below; registering at any other point is refused when the plugin
loads (the message names the plugin and these points), so a misspelled point cannot
leave a pass silently unused. The graph pass runner and the lowering pipeline read
their points from here.

Graph point (the object is a rewrite rule: ``op_names`` and ``rewrite(op)``):

- ``GRAPH_REWRITE`` ("graph_rewrite"): the first graph pass, before constant folding,
  CSE, dead-code elimination and fusion; rules run to a fixpoint.

IR points (the object is a lowering ``Pass``, or a ``PassRegistration`` holding one),
in the order the lowering pipeline reaches them:

- ``BEFORE_LOWERING`` ("before_lowering"): the module as scheduled (task mappings,
  tensor slices and multi-dimensional indices still present);
- ``AFTER_LOWERING`` ("after_lowering"): loops and flat element offsets, before the
  simplifier;
- ``BEFORE_CODEGEN`` ("before_codegen"): the module exactly as the code generator
  will print it.
"""
from __future__ import annotations

GRAPH_REWRITE = "graph_rewrite"
BEFORE_LOWERING = "before_lowering"
AFTER_LOWERING = "after_lowering"
BEFORE_CODEGEN = "before_codegen"

GRAPH_POINTS: tuple[str, ...] = (GRAPH_REWRITE,)
IR_POINTS: tuple[str, ...] = (BEFORE_LOWERING, AFTER_LOWERING, BEFORE_CODEGEN)
PASS_POINTS: tuple[str, ...] = GRAPH_POINTS + IR_POINTS
"""Every point, in pipeline order."""
