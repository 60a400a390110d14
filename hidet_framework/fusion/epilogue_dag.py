"""A tensor read by several elementwise operators that reconverge, taken as one epilogue.

GELU as exported reads its input several times (``x * 0.5 * (1 + tanh(c (x + 0.044715
x^3))))`` or ``x * 0.5 * (1 + erf(x / sqrt 2))``): after a matmul the value is read by
three (two) operators, so the epilogue chain of the partition stops there and the
readers become a prologue of the next anchor (a staged launch in front of a cp.async
GEMM). When the readers of `x` and their readers form a small DAG of injective
one-output operators whose only way out is one operator (the sink), the DAG is one
consumer of `x` in the epilogue sense: its composed task reads `x` only at the output
index, so ``epilogue_form`` (the same legality check as for a single consumer reading
one element twice, ``x * erf(x)``) decides whether it grafts onto the stores of `x`.

Kept apart (the chain stops at `x`, as before): a reader that reduces or has several
outputs, an intermediate of the DAG that is a graph output or read twice, a DAG that
does not reconverge within ``MAX_OPERATORS`` operators, and a composed task that reads
`x` at an index other than the output's (a broadcast, a transpose inside the DAG).

On by default on every target: measured on cpu (neutral) and on the H200 (session 8:
GPT-2's staged GELU launches gone, the cuda fusion tests pass with it).
``HIDET_FRAMEWORK_FUSE_MULTIUSE=0`` turns it off everywhere.
"""
from __future__ import annotations

import os
from typing import Callable

from hidet_framework.compute.definitions import tensor_input
from hidet_framework.compute.task import Task
from hidet_framework.fusion.compose_task import compose_members
from hidet_framework.fusion.graft_epilogue import _HoleForRead, epilogue_form
from hidet_framework.fusion.plan import FusionError, Member, Source
from hidet_framework.graph.tensor import Operator, Tensor
from hidet_framework.ir.expr import var

ENV_FUSE_MULTIUSE = "HIDET_FRAMEWORK_FUSE_MULTIUSE"
DAG_ATTRIBUTE = "fusion.epilogue_dag"  # the member's attributes: the names of the operators it stands for
MAX_OPERATORS = 16


# where the DAGs are on by default: measured there (cpu: session 7; cuda on the H200: session 8)
DEFAULT_TARGETS = ("cpu", "evaluator", "cuda")


def multiuse_enabled(target: str | None = None) -> bool:
    """HIDET_FRAMEWORK_FUSE_MULTIUSE=1 (or 0) turns the DAGs on (off) for every target;
    unset, they are on for the targets of DEFAULT_TARGETS."""
    value = os.environ.get(ENV_FUSE_MULTIUSE, "").strip().lower()
    if value:
        return value in {"1", "true", "yes", "on"}
    return target in DEFAULT_TARGETS


def _reads_of(task: Task, index: int) -> int:
    """How many element reads of input `index` the task's (inlined) output value holds."""
    rewriter = _HoleForRead(task.inputs[index], var("hole", task.inputs[index].dtype))
    rewriter.visit(task.inlined_value(task.outputs[0]))
    return len(rewriter.reads)


class EpilogueDag:
    """Operators that read `root` and reconverge at `sink`, seen by the partition as one
    operator: ``inputs`` (`root` first, then the other tensors they read), ``outputs``
    (the sink's), ``task`` (the members composed), ``name`` and ``attributes``
    (``DAG_ATTRIBUTE``: the operators' names)."""

    def __init__(self, root: Tensor, ops: list[Operator]) -> None:
        self.root, self.ops, self.sink = root, ops, ops[-1]
        made = {id(op): j for j, op in enumerate(ops)}
        self.inputs: list[Tensor] = [root]
        members = []
        for op in ops:
            sources = []
            for t in op.inputs:
                if t.producer is not None and id(t.producer) in made:
                    sources.append(Source("member", made[id(t.producer)]))
                    continue
                k = next((k for k, x in enumerate(self.inputs) if x is t), None)
                if k is None:
                    k = len(self.inputs)
                    self.inputs.append(t)
                sources.append(Source("input", k))
            members.append(Member(op.name, op.task, dict(op.attributes), "epilogue", sources))
        self.outputs = self.sink.outputs
        self.name = "_".join(op.name for op in ops)
        self.attributes: dict = {DAG_ATTRIBUTE: tuple(op.name for op in ops)}
        nodes = [tensor_input(f"in{k}", t.dtype, t.shape) for k, t in enumerate(self.inputs)]
        produced = compose_members(members, nodes)
        self.task = Task(self.name, nodes, [produced[-1][0]])


def find_epilogue_dag(root: Tensor, uses: dict, returned: set, position: dict[int, int],
                      why_not_joined: Callable[[Operator], str]) -> tuple[EpilogueDag | None, str]:
    """The DAG of `root`'s readers that reconverges at one operator, or (None, why not).

    :param uses: tensor uid -> [(reader, input position)].
    :param returned: uids of the graph's outputs.
    :param position: id(operator) -> its index in the graph's (topological) order.
    :param why_not_joined: '' when an operator may join a group ('' also means it is
        in no group yet).
    """
    if root.uid in returned:
        return None, "it is a graph output"
    members: dict[int, Operator] = {}

    def take(op: Operator) -> str:
        if id(op) in members:
            return ""
        why = why_not_joined(op)
        if why:
            return why
        members[id(op)] = op
        return "" if len(members) <= MAX_OPERATORS else f"its readers do not reconverge within {MAX_OPERATORS} operators"

    for reader, _ in uses.get(root.uid, ()):
        why = take(reader)
        if why:
            return None, why
    while True:
        open_ = []  # members whose output leaves the DAG
        for op in members.values():
            out = op.outputs[0]
            readers = uses.get(out.uid, ())
            if out.uid in returned or not readers or any(id(r) not in members for r, _ in readers):
                open_.append(op)
        if not open_:
            return None, "its readers' outputs are never read"
        open_.sort(key=lambda op: position[id(op)])
        if len(open_) == 1:
            break  # every other member is read only inside: they all reach this one, the sink
        first = open_[0]  # the earliest: never the sink, which reads (through others) every member
        out = first.outputs[0]
        if out.uid in returned or not uses.get(out.uid):
            return None, f"{first.name}'s output is {'a graph output' if out.uid in returned else 'never read'}"
        for reader, _ in uses[out.uid]:
            why = take(reader)
            if why:
                return None, why
    ops = sorted(members.values(), key=lambda op: position[id(op)])
    for op in ops[:-1]:  # only the root may be read several times: the composed value stays linear in size
        n = len(uses[op.outputs[0].uid])
        if n == 1:
            reader, k = uses[op.outputs[0].uid][0]
            n = _reads_of(reader.task, k)
        if n != 1:
            return None, f"{op.name}'s output is read {n} times"
    dag = EpilogueDag(root, ops)
    try:
        epilogue_form(dag.task, 0)
    except FusionError as exc:
        return None, f"its readers {dag.name}: {exc}"
    return dag, ""
