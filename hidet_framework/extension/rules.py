"""Graph rewrite rules: the descriptor plugins register at ``points.GRAPH_REWRITE``, and
a way to switch registered rules off by name.

`RewriteRule` is what the pattern-rewrite engine (``graph/passes/rewrite_patterns.py``)
reads of a rule; a plugin registers one through ``register_passes``::

    register("mine.sum_of_scaled", RewriteRule("mine.sum_of_scaled", ("mine.rowsum",), sum_of_scaled))

Any object with the same attributes is a rule too (the engine reads them by name),
but the plugins of this repository all use this class.

`rules_off(*names)` switches rules off for a with-block: the rules registered under
those names do not run (an A/B comparison in a test or a benchmark, or a rule
suspected of a wrong rewrite). A name no rule is registered under is an error naming
the registered rules, so a misspelled name cannot leave a rule running unnoticed.
The switch is per thread / async context (a `ContextVar`) and nests; rules a caller
hands the engine itself (``GraphPassContext(rewrite_rules=[...])``) are not affected.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator, Optional

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

    - `name`: the rule's name (register it under the same name: `rules_off` and the
      engine's warnings use it);
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


_OFF: contextvars.ContextVar[frozenset] = contextvars.ContextVar("hidet_framework_rules_off", default=frozenset())


def registered_rule_names() -> list[str]:
    """The names rewrite rules are registered under, in registration order."""
    from .host import plugin_host

    return [name for name, rule in plugin_host().passes.items() if rule.point == GRAPH_REWRITE]


@contextlib.contextmanager
def rules_off(*names: str) -> Iterator[None]:
    """For the with-block, the rewrite rules registered under `names` do not run (see
    the module docstring). Raises ValueError, naming the registered rules, for a name
    no rule is registered under."""
    known = registered_rule_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no rewrite rule is registered as {', '.join(map(repr, unknown))}; "
                         f"the registered rules: {', '.join(known) or '(none)'}")
    token = _OFF.set(_OFF.get() | frozenset(names))
    try:
        yield
    finally:
        _OFF.reset(token)


def rules_switched_off() -> frozenset:
    """The names of the rules `rules_off` switched off here (empty outside any block)."""
    return _OFF.get()
