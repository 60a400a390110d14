"""The pattern-rewrite engine: plugins supply rules, this applies them to a fixpoint.

A rule is an object registered through ``register_passes`` with

- ``point == "graph_rewrite"`` (``extension.points.GRAPH_REWRITE``),
- ``op_names``: the operator names it looks at (it is never shown other operators),
- ``rewrite(op) -> list[Tensor] | None``: replacement tensors for ``op.outputs``
  (same count, shapes and dtypes), built from ``op.inputs``; None leaves `op` alone;
- optionally ``targets``: the target kinds it is for (a layout made for one backend's
  kernels, e.g. weights packed for the CPU's SIMD width); such a rule runs only when
  ``ctx.target`` is one of them.

- optionally ``phase`` (an int, 1 when absent): rules run phase by phase, lowest
  first, each phase to its own fixpoint; folding rules (phase 0) thus see patterns
  that a lowering rewrite of phase 1 (conv2d into im2col + matmul) would hide.
- optionally ``needs_uses = True``: the rule is called as ``rewrite(op, uses)``, where
  `uses` (a `GraphUses`) tells who reads a tensor (a horizontal rule looks for the
  siblings of `op` that read the same input).

``extension.RewriteRule`` is the descriptor holding these attributes; rules switched
off by name (``extension.rules_off``) are left out of the registered ones.

Rules are tried in registration order; the first that answers wins for that operator.
A round visits every operator once (inputs already rewritten, so rules see the current
graph); rounds repeat until none fires, at most ``ctx.max_rewrite_rounds`` times — two
rules that undo each other must not hang the compiler, so the bound is reported with a
warning naming the rules still firing, and the last graph (still correct) is kept.
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

from hidet_framework.extension.points import GRAPH_REWRITE
from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.passes.base import GraphPassContext, Rebuilder
from hidet_framework.graph.tensor import Operator, Tensor

REWRITE_POINT = GRAPH_REWRITE


class GraphRewriteError(ValueError):
    """A rewrite rule returned something that cannot replace the operator."""


def registered_rules() -> list[Any]:
    """The rules plugins registered at the rewrite point, in registration order, less
    those `extension.rules_off` switched off here."""
    from hidet_framework.extension import plugin_host, rules_switched_off

    passes, off = plugin_host().passes, rules_switched_off()
    return [rule for name, rule in passes.items() if rule.point == REWRITE_POINT and name not in off]


def _rule_name(rule: Any) -> str:
    return getattr(rule, "name", None) or type(rule).__name__


def _check_replacement(rule: Any, op: Operator, outs: Any) -> list[Tensor]:
    if isinstance(outs, Tensor):
        outs = [outs]
    outs = list(outs)
    where = f"rewrite rule {_rule_name(rule)!r} on {op!r}"
    if len(outs) != len(op.outputs):
        raise GraphRewriteError(f"{where}: returned {len(outs)} tensors for {len(op.outputs)} outputs")
    for k, (old, new) in enumerate(zip(op.outputs, outs)):
        if not isinstance(new, Tensor):
            raise GraphRewriteError(f"{where}: output {k} replacement is {type(new).__name__}, not a Tensor")
        if new.shape != old.shape or new.dtype is not old.dtype:
            raise GraphRewriteError(f"{where}: output {k} is {old.dtype.short}{list(old.shape)}, "
                                    f"the replacement is {new.dtype.short}{list(new.shape)}")
    return outs


class GraphUses:
    """Who reads a tensor, as the graph stood when this round began.

    ``readers(t)``: the (operator, input position) pairs reading `t`, in graph order,
    among the operators none of whose inputs was replaced yet in this round (so every
    operator listed reads the graph the rule sees, and two rules asking about one
    tensor in one round get the same answer); None when `t` itself was replaced or
    is not in the graph (then a rule must not rely on knowing its readers).
    ``is_output(t)``: whether `t` is returned by the graph.
    ``original_readers(t)``: the (operator, input position) pairs reading `t` as the
    graph stood when this round began, where a tensor rebuilt in this round (an
    unchanged operator over inputs a rule replaced upstream) stands for the tensor it
    is a copy of (its readers are rebuilt to read it); None for a tensor a rule made.
    The operators are the round's originals: to inspect, not to build on. `is_output`
    follows rebuilt copies the same way. (A rule deciding whether a tensor is private
    to one reader can then decide downstream of another rule's rewrite in the same
    round, where `readers` answers None.)
    """

    def __init__(self, graph: FlowGraph, rebuild: Rebuilder) -> None:
        self._rebuild = rebuild
        self._readers: dict[int, list[tuple[Operator, int]]] = {}
        self._known = {t.uid for t in graph.inputs}
        for op in graph.nodes:
            self._known.update(t.uid for t in op.outputs)
            self._known.update(t.uid for t in op.inputs)
            for pos, t in enumerate(op.inputs):
                self._readers.setdefault(t.uid, []).append((op, pos))
        self._outputs = {t.uid for t in graph.outputs}

    def readers(self, t: Tensor) -> list[tuple[Operator, int]] | None:
        if t.uid not in self._known or self._rebuild.resolve(t) is not t:
            return None
        return [(op, pos) for op, pos in self._readers.get(t.uid, ())
                if all(self._rebuild.resolve(x) is x for x in op.inputs)]

    def is_output(self, t: Tensor) -> bool:
        return t.uid in self._outputs or self._rebuild.origin(t).uid in self._outputs

    def original_readers(self, t: Tensor) -> list[tuple[Operator, int]] | None:
        t = self._rebuild.origin(t)
        if t.uid not in self._known:
            return None
        return list(self._readers.get(t.uid, ()))


def _round(graph: FlowGraph, by_name: dict[str, list[Any]]) -> tuple[FlowGraph, list[str]]:
    """One sweep in topological order; returns the new graph and the rules that fired."""
    rebuild = Rebuilder()
    uses = None
    fired: list[str] = []
    for op in graph.nodes:
        op = rebuild.operator(op)
        for rule in by_name.get(op.name, ()):
            if getattr(rule, "needs_uses", False):
                uses = uses or GraphUses(graph, rebuild)
                outs = rule.rewrite(op, uses)
            else:
                outs = rule.rewrite(op)
            if outs is None:
                continue
            outs = _check_replacement(rule, op, outs)
            if any(new is not old for new, old in zip(outs, op.outputs)):
                for old, new in zip(op.outputs, outs):
                    rebuild.replace(old, new)
                fired.append(_rule_name(rule))
            break
    return rebuild.graph(graph), fired


def rewrite_patterns(graph: FlowGraph, ctx: GraphPassContext | None = None) -> FlowGraph:
    ctx = ctx or GraphPassContext()
    rules: Sequence[Any] = registered_rules() if ctx.rewrite_rules is None else ctx.rewrite_rules
    phases: dict[int, dict[str, list[Any]]] = {}
    for rule in rules:
        targets = getattr(rule, "targets", None)
        if targets is not None and ctx.target not in targets:
            continue
        by_name = phases.setdefault(int(getattr(rule, "phase", 1)), {})
        for name in getattr(rule, "op_names", ()):
            by_name.setdefault(name, []).append(rule)
    if not any(phases.values()) or ctx.max_rewrite_rounds <= 0:
        return graph
    applied = 0
    for phase in sorted(phases):
        for _ in range(ctx.max_rewrite_rounds):
            graph, fired = _round(graph, phases[phase])
            applied += len(fired)
            if not fired:
                break
        else:
            warnings.warn(f"graph rewriting did not reach a fixpoint in {ctx.max_rewrite_rounds} rounds; "
                          f"rules still firing: {', '.join(sorted(set(fired)))}. Keeping the last graph.",
                          RuntimeWarning, stacklevel=2)
    ctx.record("rewrite_patterns", applied=applied)
    return graph
