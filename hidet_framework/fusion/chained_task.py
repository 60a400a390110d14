"""The fallback for a group whose graft failed: its members' own compiled tasks run
one after another, the tensors between them in workspace buffers.

The graph has already replaced the group by one fused operator, so the fallback must
look like one compiled task (the compiled graph asks only for ``workspace`` and
``bind``); the answer is the unfused one, launch for launch.

Where only the producers cannot be grafted (the CPU's packed convolution reads its
input through a pointer, so a channel slice before it is refused), `split_prologues`
keeps the rest together: the producers run apart and the anchor with its consumers is
one fused member (Inception-V3: slice, then convolution + relu, instead of three
kernels).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from hidet_framework.compute.task import Task
from hidet_framework.fusion.compose_task import compose_task
from hidet_framework.fusion.plan import FusionGroup, Member, Source
from hidet_framework.schedule.scheduled_task import WorkspaceSpec


class ChainedTask:
    """Members of `group` run apart.

    :param task: the fused operator's task (the group's inputs and outputs).
    :param members: each member's compiled task (``workspace`` and ``bind``), in
        group order.
    :param reason: why the graft failed (for the fusion report).
    """

    def __init__(self, task: Task, group: FusionGroup, members: Sequence[Any], reason: str) -> None:
        self.task, self.group, self.members = task, group, list(members)
        self.fallback_reason = reason
        self.scheduled = None
        output_slot = {pair: k for k, pair in enumerate(group.outputs)}
        # where each member output lives: ("output", k) or ("workspace", k)
        self._home: dict[tuple, tuple] = {}
        specs: list[WorkspaceSpec] = []
        for j, member in enumerate(group.members):
            for o, t in enumerate(member.task.outputs):
                if (j, o) in output_slot:
                    self._home[(j, o)] = ("output", output_slot[(j, o)])
                else:
                    self._home[(j, o)] = ("workspace", len(specs))
                    specs.append(WorkspaceSpec(f"m{j}_{t.name}", t.dtype, [int(s) for s in t.shape]))
        self._own_workspace: list[range] = []
        for j, compiled in enumerate(self.members):
            start = len(specs)
            specs += [WorkspaceSpec(f"m{j}_{w.name}", w.dtype, w.shape) for w in compiled.workspace]
            self._own_workspace.append(range(start, len(specs)))
        self.workspace = tuple(specs)

    def bind(self, inputs: Sequence[Any], outputs: Sequence[Any],
             workspace: Sequence[Any] = ()) -> list[tuple[Callable[..., None], tuple]]:
        pools = {"input": list(inputs), "output": list(outputs), "workspace": list(workspace)}
        launches: list[tuple[Callable[..., None], tuple]] = []
        for j, (member, compiled) in enumerate(zip(self.group.members, self.members)):
            member_inputs = [pools["input"][s.index] if s.kind == "input"
                             else pools[self._home[(s.index, 0)][0]][self._home[(s.index, 0)][1]]
                             for s in member.sources]
            member_outputs = [pools[kind][k] for kind, k in
                              (self._home[(j, o)] for o in range(len(member.task.outputs)))]
            member_workspace = [pools["workspace"][k] for k in self._own_workspace[j]]
            launches += compiled.bind(member_inputs, member_outputs, member_workspace)
        return launches

    def __repr__(self) -> str:
        return f"ChainedTask({self.group.describe()!r}, members={len(self.members)}, reason={self.fallback_reason!r})"


def split_prologues(task: Task, group: FusionGroup) -> tuple[FusionGroup, FusionGroup, Task] | None:
    """(outer, inner, inner task): `group` as its prologue members followed by one member
    that is the anchor with its epilogues (`inner`, over its own inputs: the group's and
    the producers' outputs, in order of first use; `inner task` its composed Task).
    None when there is nothing to split: no prologue, no epilogue, or a producer whose
    output leaves the group."""
    pro = [j for j, m in enumerate(group.members) if m.role == "prologue"]
    rest = [j for j, m in enumerate(group.members) if m.role != "prologue"]
    if not pro or len(rest) < 2 or any(j in pro for j, _ in group.outputs):
        return None
    at = {j: k for k, j in enumerate(rest)}
    outer_sources: list[Source] = []        # inner input k comes from outer_sources[k]
    seen: dict[tuple, int] = {}

    def inner_source(s: Source) -> Source:
        if s.kind == "member" and s.index in at:
            return Source("member", at[s.index])
        if (s.kind, s.index) not in seen:
            seen[(s.kind, s.index)] = len(outer_sources)
            outer_sources.append(s)
        return Source("input", seen[(s.kind, s.index)])

    members = [Member(group.members[j].name, group.members[j].task, group.members[j].attributes,
                      group.members[j].role, [inner_source(s) for s in group.members[j].sources]) for j in rest]
    inner = FusionGroup(members, at[group.anchor], [(at[j], o) for j, o in group.outputs], len(outer_sources),
                        views=group.views)
    nodes = [task.inputs[s.index] if s.kind == "input" else group.members[s.index].task.outputs[0]
             for s in outer_sources]
    inner_task = compose_task(inner, [t.shape for t in nodes], [t.dtype for t in nodes])
    place = {j: k for k, j in enumerate(pro)}

    def outer_source(s: Source) -> Source:
        return s if s.kind == "input" else Source("member", place[s.index])

    outer = FusionGroup([Member(group.members[j].name, group.members[j].task, group.members[j].attributes,
                                "prologue", [outer_source(s) for s in group.members[j].sources]) for j in pro]
                        + [Member("fused", inner_task, {}, "anchor", [outer_source(s) for s in outer_sources])],
                        len(pro), [(len(pro), k) for k in range(len(group.outputs))], group.num_inputs,
                        views=group.views)
    return outer, inner, inner_task
