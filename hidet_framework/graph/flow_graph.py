"""FlowGraph: the operators between a graph's inputs and outputs, in order."""
from __future__ import annotations

from typing import Sequence

from hidet_framework.graph.tensor import Operator, Tensor


class GraphError(ValueError):
    pass


class FlowGraph:
    """A traced graph.

    :param inputs: the graph inputs, in call order.
    :param outputs: the graph outputs, in return order.
    """

    def __init__(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        for k, t in enumerate(self.inputs):
            if not isinstance(t, Tensor) or not t.is_graph_input():
                raise GraphError(f"graph input {k} must be a symbol (hf.symbol), got {t!r}")
        if len({t.uid for t in self.inputs}) != len(self.inputs):
            raise GraphError("the same tensor is given twice as a graph input")
        self.nodes = self._topological_order()

    def _topological_order(self) -> list[Operator]:
        order: list[Operator] = []
        seen: set[int] = set()
        inputs = {t.uid for t in self.inputs}
        for out in self.outputs:
            if not isinstance(out, Tensor):
                raise GraphError(f"graph outputs must be Tensors, got {type(out).__name__}")
            stack: list[tuple[Operator, bool]] = []
            if out.producer is not None:
                stack.append((out.producer, False))
            elif out.is_graph_input() and out.uid not in inputs:
                raise GraphError(f"output {out!r} is a symbol that is not among the graph inputs")
            while stack:  # iterative DFS: deep graphs must not hit the recursion limit
                op, expanded = stack.pop()
                if id(op) in seen:
                    continue
                if expanded:
                    seen.add(id(op))
                    order.append(op)
                    continue
                stack.append((op, True))
                for t in reversed(op.inputs):
                    if t.producer is not None and id(t.producer) not in seen:
                        stack.append((t.producer, False))
                    elif t.is_graph_input() and t.uid not in inputs:
                        raise GraphError(f"{op.name} reads {t!r}, a symbol that is not among the graph inputs")
        return order

    def constants(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for op in self.nodes:
            for t in op.inputs:
                if t.is_constant():
                    seen.setdefault(t.uid, t)
        return list(seen.values())

    def __repr__(self) -> str:
        lines = [f"FlowGraph(inputs=[{', '.join(repr(t) for t in self.inputs)}])"]
        for op in self.nodes:
            outs = ", ".join(f"{t.name}: {t.dtype.short}{list(t.shape)}" for t in op.outputs)
            lines.append(f"  {outs} = {op!r}")
        lines.append(f"  return {', '.join(t.name for t in self.outputs)}")
        return "\n".join(lines)


def trace(outputs: Tensor | Sequence[Tensor], inputs: Sequence[Tensor]) -> FlowGraph:
    """The graph computing `outputs` from `inputs`."""
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    return FlowGraph(inputs, outputs)
