"""The math of a fusion group as one Task: the members' compute definitions wired
together, from the group's inputs to its outputs.

The fused operator carries it so that everything that reads an operator's task keeps
working: its fingerprint (a stable cache key that changes with the fused structure),
its inputs and outputs (the compiled graph binds buffers by them), and its meaning
(the auto-scheduler or the IR evaluator can run it as it is).
"""
from __future__ import annotations

from typing import Sequence

from hidet_framework.compute.definitions import GridCompute, TensorNode, substitute_compute, tensor_input
from hidet_framework.compute.task import Task
from hidet_framework.fusion.plan import FusionGroup


def compose_members(members: Sequence, inputs: Sequence[TensorNode]) -> list[tuple]:
    """Each member's outputs rebuilt over `inputs`, in member order; a member reads
    ``inputs[k]`` (``Source("input", k)``) or output 0 of an earlier member."""
    produced: list[tuple] = []  # per member: its rebuilt outputs
    for j, member in enumerate(members):
        mapping: dict = {}
        for node, source in zip(member.task.inputs, member.sources):
            mapping[node] = inputs[source.index] if source.kind == "input" else produced[source.index][0]
        for t in member.task.tensors():  # producers first, so definitions read rebuilt tensors
            if t.definition is None:
                continue
            value = substitute_compute(t.definition.value, mapping)
            mapping[t] = TensorNode(f"m{j}_{t.name}", t.type, GridCompute(t.definition.axes, value))
        produced.append(tuple(mapping[t] for t in member.task.outputs))
    return produced


def compose_task(group: FusionGroup, input_shapes: Sequence[tuple], input_dtypes: Sequence,
                 name: str = "fused") -> Task:
    """A Task computing `group`'s outputs from inputs of the given shapes/dtypes."""
    inputs = [tensor_input(f"in{k}", dtype, shape)
              for k, (shape, dtype) in enumerate(zip(input_shapes, input_dtypes))]
    produced = compose_members(group.members, inputs)
    outputs = [produced[j][o] for j, o in group.outputs]
    attributes = {"fused": group.describe(), "anchor": group.anchor_member.name}
    return Task(name, inputs, outputs, attributes)
