"""Graph rewrite rules: the descriptor plugins register at ``points.GRAPH_REWRITE``.

`RewriteRule` is what the pattern-rewrite engine (``graph/passes/rewrite_patterns.py``)
reads of a rule; a plugin registers one through ``register_passes``::

    register("mine.sum_of_scaled", RewriteRule("mine.sum_of_scaled", ("mine.rowsum",), sum_of_scaled))

Any object with the same attributes is a rule too (the engine reads them by name),
but the plugins of this repository all use this class.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import attrs

from .points import GRAPH_REWRITE


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # tuple("matmul") would be its letters
        raise TypeError(f"op_names is a tuple of operator names, not the string {value!r}")
    return tuple(value)


def _kinds(value: Any) -> Optional[tuple[str, ...]]:
    if value is None:
        return None
    if isinstance(value, str):
        raise TypeError(f"targets is a tuple of target kinds, not the string {value!r}")
    return tuple(value)


@attrs.frozen
class RewriteRule:
    """A graph rewrite rule as the engine reads it.

    - `name`: the rule's name (register it under the same name: the engine's warnings
      use it);
    - `op_names`: the operator names the engine shows it (never any other operator);
    - `rewrite`: ``rewrite(op)`` (``rewrite(op, uses)`` with `needs_uses`) returns
      replacement tensors for ``op.outputs`` (same count, shapes and dtypes) built with
      operator functions, or None to leave `op` alone;
    - `point`: the pipeline point, ``points.GRAPH_REWRITE`` (checked when the plugin
      loads, like every pass's point);
    - `phase`: rules run phase by phase, lowest first, each to its own fixpoint (a
      folding rule at phase 0 sees a pattern before a phase-1 lowering rewrite hides it);
    - `needs_uses`: call ``rewrite(op, uses)``, `uses` telling who reads a tensor;
    - `targets`: the target kinds the rule is for (None: every target);
    - `description`: one line saying what the rule does.
    """

    name: str
    op_names: tuple[str, ...] = attrs.field(converter=_names)
    rewrite: Callable[..., Any]
    point: str = attrs.field(default=GRAPH_REWRITE, kw_only=True)
    phase: int = attrs.field(default=1, kw_only=True)
    needs_uses: bool = attrs.field(default=False, kw_only=True)
    targets: Optional[tuple[str, ...]] = attrs.field(default=None, converter=_kinds, kw_only=True)
    description: str = attrs.field(default="", kw_only=True)


def registered_rule_names() -> list[str]:
    """The names rewrite rules are registered under, in registration order."""
    from .host import plugin_host

    return [name for name, rule in plugin_host().passes.items() if rule.point == GRAPH_REWRITE]
