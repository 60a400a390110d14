"""The fallback for a group whose graft failed: its members' own compiled tasks run
one after another, the tensors between them in workspace buffers.

The graph has already replaced the group by one fused operator, so the fallback must
look like one compiled task (the compiled graph asks only for ``workspace`` and
``bind``); the answer is the unfused one, launch for launch.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from hidet_framework.compute.task import Task
from hidet_framework.fusion.plan import FusionGroup
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
