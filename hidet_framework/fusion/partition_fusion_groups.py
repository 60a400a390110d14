"""Partition the graph into fusion groups and replace each group of two or more
operators by one ``fused`` operator (docs/design.md, Fusion).

Rules, in this order (an operator joins at most one group):

1. Anchors are the operators that are not injective (matmul, reductions, pooling...).
   Each anchor's output grows an epilogue chain: its single consumer joins when that
   consumer is injective with one output and a bijection from this input to its output
   (``Task.inverse_map``), reading one element of it per output element; its other
   inputs (a bias, a residual) become inputs of the group. Epilogues come first: a value stored once by the anchor is
   cheaper than one recomputed on every load by the next anchor's prologue.
2. Each anchor's inputs grow prologue trees: an input's producer joins when it is
   injective with one output. Producers of producers follow.
3. What is left is injective. Walking from the graph's outputs backwards, each such
   operator not yet in a group anchors one (the auto-scheduler iterates over its
   output) and grows a prologue tree the same way, so an elementwise chain, or a tree
   of them, becomes one kernel. (Prologues rather than an epilogue chain from the first
   operator: a prologue needs only injectivity, so broadcasts, slices and trees fuse.)

An edge is fused only when the tensor on it has exactly one use and is not a graph
output: a tensor read twice or returned must be written to memory anyway. One
exception on the epilogue side (``epilogue_dag.py``; by default on cpu and the
evaluator): a value whose readers reconverge at one operator (GELU reads its input
three times) joins the chain as one member, the readers composed, when that composed
consumer passes the same bijection check. These rules
need no knowledge of the anchor's kernel; a template that cannot take a graft is found
when the driver grafts, and that group then runs as separate kernels.
"""
from __future__ import annotations

from hidet_framework.fusion.compose_task import compose_task
from hidet_framework.fusion.epilogue_dag import EpilogueDag, find_epilogue_dag, multiuse_enabled
from hidet_framework.fusion.view_epilogue import view_epilogue_enabled
from hidet_framework.fusion.graft_epilogue import epilogue_form
from hidet_framework.fusion.plan import FusionError, FusionGroup, Member, Source
from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.passes.base import GraphPassContext, Rebuilder
from hidet_framework.graph.passes.pipeline import GraphPass
from hidet_framework.graph.tensor import Operator, Tensor

FUSED_OPERATOR = "fused"
GROUP_ATTRIBUTE = "fusion_group"
BOUNDARIES_STAT = "fusion_boundaries"  # pass_stats key: {output name: why fusion stopped there}


def _not_bijective_because(op: Operator, position: int) -> str:
    """Why `op` cannot take input `position` as an epilogue ('' when it can)."""
    try:
        epilogue_form(op.task, position)
    except FusionError as exc:
        return str(exc) or "not a bijection"
    return ""


def _why_not_joined(op: Operator) -> str:
    """Why `op` cannot join another operator's group ('' when it could)."""
    if len(op.outputs) != 1:
        return f"{op.name} has {len(op.outputs)} outputs"
    if not op.task.is_injective():
        return f"{op.name} reduces (not injective): it anchors its own group"
    if op.outputs[0].size == 0:
        return f"{op.name}'s output is empty"
    return ""


class _Partition:
    def __init__(self, graph: FlowGraph, target: str | None = None) -> None:
        self.graph = graph
        self.uses: dict[int, list[tuple[Operator, int]]] = {}
        for op in graph.nodes:
            for pos, t in enumerate(op.inputs):
                self.uses.setdefault(t.uid, []).append((op, pos))
        self.returned = {t.uid for t in graph.outputs}
        self.group_of: dict[int, int] = {}  # id(op) -> group index
        self.groups: list[dict] = []
        self.boundaries: list[list[str]] = []  # per group: why a neighbour stayed out (fusion_report)
        self.position = {id(op): k for k, op in enumerate(graph.nodes)}
        self.multiuse = multiuse_enabled(target)

    def _single_use(self, t: Tensor) -> bool:
        return t.uid not in self.returned and len(self.uses.get(t.uid, ())) == 1

    def _why_stored(self, t: Tensor) -> str:
        if t.uid in self.returned:
            return "it is a graph output"
        return f"it is read {len(self.uses.get(t.uid, ()))} times"

    def _new_group(self, anchor: Operator) -> int:
        self.groups.append({"anchor": anchor, "prologue": [], "epilogue": []})
        self.boundaries.append([])
        self.group_of[id(anchor)] = len(self.groups) - 1
        return len(self.groups) - 1

    def _grow_epilogue(self, g: int) -> None:
        current = self.groups[g]["anchor"]
        while len(current.outputs) == 1:
            if not self._single_use(current.outputs[0]):
                if not self.uses.get(current.outputs[0].uid):
                    return  # a graph output nothing reads is just the end
                dag, why = self._epilogue_dag(current.outputs[0])
                if dag is None:
                    self.boundaries[g].append(f"stored after {current.name}: {self._why_stored(current.outputs[0])}"
                                              + (f" ({why})" if why else ""))
                    return
                for op in dag.ops:
                    self.group_of[id(op)] = g
                self.position[id(dag)] = self.position[id(dag.sink)]
                self.groups[g]["epilogue"].append(dag)
                current = dag
                continue
            consumer, position = self.uses[current.outputs[0].uid][0]
            why = _why_not_joined(consumer)
            if id(consumer) in self.group_of and not why:
                return  # taken by another group (reasons are given there)
            why = why or _not_bijective_because(consumer, position)
            if why:
                self.boundaries[g].append(f"{consumer.name} not fused after {current.name}: {why}")
                return
            self.group_of[id(consumer)] = g
            self.groups[g]["epilogue"].append(consumer)
            current = consumer

    def _epilogue_dag(self, t: Tensor) -> tuple[EpilogueDag | None, str]:
        """The readers of `t` as one epilogue (epilogue_dag.py; by target, or the switch)."""
        if not self.multiuse:
            return None, ""
        return find_epilogue_dag(t, self.uses, self.returned, self.position,
                                 lambda op: _why_not_joined(op) or ("taken" if id(op) in self.group_of else ""))

    def _grow_prologue(self, g: int, op: Operator) -> None:
        for t in op.inputs:
            producer = t.producer
            if producer is None:
                continue
            why = _why_not_joined(producer)
            if id(producer) in self.group_of and not why:
                continue  # taken by another group (reasons are given there)
            why = why or ("" if self._single_use(t) else self._why_stored(t))
            if why:
                self.boundaries[g].append(f"{producer.name} not fused before {op.name}: {why}")
                continue
            self.group_of[id(producer)] = g
            self.groups[g]["prologue"].append(producer)
            self._grow_prologue(g, producer)

    def run(self) -> None:
        nodes = self.graph.nodes
        anchored = [self._new_group(op) for op in nodes if not op.task.is_injective()]
        for g in anchored:
            self._grow_epilogue(g)
        for g in anchored:
            self._grow_prologue(g, self.groups[g]["anchor"])
        for op in reversed(nodes):
            if id(op) not in self.group_of:
                self._grow_prologue(self._new_group(op), op)


def _describe_group(parts: dict, position: dict[int, int],
                    views: bool = False) -> tuple[FusionGroup, list[Tensor], list[Tensor]]:
    """The FusionGroup of one partition, its external input tensors and its outputs."""
    anchor = parts["anchor"]
    roles = {id(anchor): "anchor"}
    roles.update({id(op): "prologue" for op in parts["prologue"]})
    roles.update({id(op): "epilogue" for op in parts["epilogue"]})
    ops = sorted([anchor, *parts["prologue"], *parts["epilogue"]], key=lambda op: position[id(op)])
    index = {id(op): j for j, op in enumerate(ops)}
    for j, op in enumerate(ops):
        for inner in getattr(op, "ops", ()):  # an EpilogueDag: its sink's output is the member's
            index[id(inner)] = j
    inputs: list[Tensor] = []
    members = []
    for op in ops:
        sources = []
        for t in op.inputs:
            if t.producer is not None and id(t.producer) in index:
                sources.append(Source("member", index[id(t.producer)]))
                continue
            k = next((k for k, x in enumerate(inputs) if x is t), None)
            if k is None:
                k = len(inputs)
                inputs.append(t)
            sources.append(Source("input", k))
        members.append(Member(op.name, op.task, dict(op.attributes), roles[id(op)], sources))
    last = parts["epilogue"][-1] if parts["epilogue"] else anchor
    outputs = tuple((index[id(last)], o) for o in range(len(last.outputs)))
    group = FusionGroup(members, index[id(anchor)], outputs, len(inputs), views=views)
    return group, inputs, [last.outputs[o] for _, o in outputs]


def partition_fusion_groups(graph: FlowGraph, ctx: GraphPassContext | None = None) -> FlowGraph:
    ctx = ctx or GraphPassContext()
    partition = _Partition(graph, ctx.target)
    partition.run()
    views = view_epilogue_enabled(ctx.target)  # view_epilogue.py: by target, or the switch
    position = partition.position  # graph order, and each epilogue DAG at its sink's place
    last_member: dict[int, int] = {}  # group index -> position of its last member
    for op in graph.nodes:
        last_member[partition.group_of[id(op)]] = position[id(op)]
    rebuild = Rebuilder()
    fused = grouped = 0
    for op in graph.nodes:
        g = partition.group_of[id(op)]
        parts = partition.groups[g]
        if not parts["prologue"] and not parts["epilogue"]:
            rebuild.operator(op)
            continue
        if position[id(op)] != last_member[g]:
            continue  # the fused operator is built at the group's last member: its inputs exist by then
        group, inputs, outputs = _describe_group(parts, position, views)
        inputs = [rebuild.resolve(t) for t in inputs]
        task = compose_task(group, [t.shape for t in inputs], [t.dtype for t in inputs])
        new = Operator(FUSED_OPERATOR, inputs, task, {GROUP_ATTRIBUTE: group})
        for old, out in zip(outputs, new.outputs):
            out.name = old.name
            rebuild.replace(old, out)
        fused += 1
        grouped += len(group.members)
    ctx.record("partition_fusion_groups", groups=fused, operators_fused=grouped)
    # why each group (or lone operator) stops where it does, by its output's name (kept
    # across the rebuild); fusion_report() shows it
    boundaries = ctx.stats.setdefault(BOUNDARIES_STAT, {})
    for parts, reasons in zip(partition.groups, partition.boundaries):
        if reasons:
            last = parts["epilogue"][-1] if parts["epilogue"] else parts["anchor"]
            boundaries[last.outputs[0].name] = "; ".join(reasons)
    return rebuild.graph(graph)


# The fusion stage's graph passes, run after ``graph.passes.GRAPH_PASSES``.
FUSION_PASSES: list[GraphPass] = [partition_fusion_groups]
