"""What every graph pass shares: the pass context and rebuilding a graph with some
tensors replaced.

A graph pass is a function ``pass_(graph, ctx) -> FlowGraph``. It never mutates its
input: operators are immutable records, so replacing a tensor means building new
operators for everything downstream of it. `rebuild` does exactly that, and shares
every operator whose inputs did not change.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import attrs
import numpy as np

from hidet_framework.compute.task import Task
from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.tensor import Operator, Tensor

# Evaluates a task on constant arrays: the outputs, or None when it cannot (no usable
# backend and too big for the IR evaluator). The driver supplies one that compiles on
# the CPU (or runs the IR evaluator); passes never import the driver or the runtime
# themselves (both sit above them).
TaskEvaluator = Callable[[Task, Sequence[np.ndarray]], Optional[Sequence[np.ndarray]]]


@attrs.define
class GraphPassContext:
    """What graph passes may use besides the graph.

    :param evaluate: runs a task on constants (constant folding); None folds nothing.
    :param rewrite_rules: rewrite rules; None = those plugins registered at point
        ``graph_rewrite``.
    :param max_rewrite_rounds: the bound on rewrite rounds before giving up on a
        fixpoint (a pair of rules undoing each other would otherwise loop forever).
    :param stats: what each pass did, by pass name (filled by the passes).
    :param target: the target kind the graph is compiled for ("cpu", "cuda"), None
        when unknown; rewrite rules that declare ``targets`` run only for those.
    """

    evaluate: Optional[TaskEvaluator] = None
    rewrite_rules: Optional[Sequence[Any]] = None
    max_rewrite_rounds: int = 16
    stats: dict = attrs.field(factory=dict)
    target: Optional[str] = None

    def record(self, pass_name: str, **counts: int) -> None:
        entry = self.stats.setdefault(pass_name, {})
        for key, value in counts.items():
            entry[key] = entry.get(key, 0) + value


class Rebuilder:
    """Rebuilds operators in topological order with some tensors replaced.

    ``replace(old, new)`` records a substitution; ``operator(op)`` returns `op` itself
    when none of its inputs was replaced, else an equal operator over the new inputs
    (whose outputs replace the old outputs automatically).
    """

    def __init__(self) -> None:
        self._by_uid: dict[int, Tensor] = {}
        self._origin: dict[int, Tensor] = {}    # output of an operator `operator` rebuilt -> the old output

    def resolve(self, t: Tensor) -> Tensor:
        while t.uid in self._by_uid:
            t = self._by_uid[t.uid]
        return t

    def replace(self, old: Tensor, new: Tensor) -> None:
        if old.uid != new.uid:
            self._by_uid[old.uid] = new

    def operator(self, op: Operator) -> Operator:
        inputs = [self.resolve(t) for t in op.inputs]
        if all(a is b for a, b in zip(inputs, op.inputs)):
            return op
        new = Operator(op.name, inputs, op.task, op.attributes)
        for old_out, new_out in zip(op.outputs, new.outputs):
            new_out.name = old_out.name  # keep readable names stable across passes
            self.replace(old_out, new_out)
            self._origin[new_out.uid] = old_out
        return new

    def origin(self, t: Tensor) -> Tensor:
        """The tensor `t` is a rebuilt copy of (an equal operator over replaced inputs,
        `operator`), followed back to the first; `t` itself where it is not one."""
        while t.uid in self._origin:
            t = self._origin[t.uid]
        return t

    def graph(self, graph: FlowGraph) -> FlowGraph:
        """The graph with the same inputs whose outputs are the resolved outputs."""
        outputs = [self.resolve(t) for t in graph.outputs]
        if all(a is b for a, b in zip(outputs, graph.outputs)):
            return FlowGraph(graph.inputs, graph.outputs)
        return FlowGraph(graph.inputs, outputs)


def attributes_key(attributes: dict) -> str:
    """A canonical, hashable text of operator attributes (values may be lists, tuples,
    numpy arrays...), for comparing operators."""
    def canon(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return ("ndarray", v.dtype.str, v.shape, v.tobytes().hex())
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(canon(x) for x in v))
        if isinstance(v, dict):
            return ("dict", tuple(sorted((str(k), canon(x)) for k, x in v.items())))
        return (type(v).__name__, repr(v))

    return repr(canon(dict(attributes)))
