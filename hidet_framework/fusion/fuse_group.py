"""Turn the anchor's ScheduledTask into the fused group's: graft the prologue
producers (downstream first, so a chain unrolls one link at a time) and then the
epilogue consumers (in chain order; views that end the chain are a new name for the
buffer, ``view_epilogue.py``), and renumber the buffers to the group's inputs
and outputs.
"""
from __future__ import annotations

from hidet_framework.fusion.bound_kernel import BoundKernel
from hidet_framework.fusion.graft_epilogue import graft_consumer
from hidet_framework.fusion.graft_prologue import graft_producer
from hidet_framework.fusion.inplace import with_output_aliases
from hidet_framework.fusion.plan import FusionError, FusionGroup, Source
from hidet_framework.fusion.view_epilogue import rename_buffer, view_tail
from hidet_framework.schedule.scheduled_task import ScheduledTask


def _key(source: Source) -> tuple:
    # buffers are named by where they come from: group input k, or member j's output 0
    return ("input", source.index) if source.kind == "input" else ("member", source.index, 0)


def fuse_group(anchor_scheduled: ScheduledTask, group: FusionGroup, views: bool = True) -> ScheduledTask:
    """The anchor's kernels with the group's producers and consumers grafted in.

    :param anchor_scheduled: the anchor task's schedule, over its own inputs/outputs,
        built with ``group.anchor_attributes(views)``.
    :param views: rename the buffer for views that end the chain (``view_epilogue``)
        rather than graft them.
    :returns: a ScheduledTask over the group's inputs (``group.num_inputs``) and
        outputs (``group.outputs``).
    :raises FusionError: a graft is impossible (the caller runs the members apart).
    """
    anchor = group.anchor_member
    kernel = BoundKernel(anchor_scheduled, [_key(s) for s in anchor.sources],
                         [("member", group.anchor, o) for o in range(len(anchor.task.outputs))])
    for j, member in reversed(group.members_in("prologue")):
        graft_producer(kernel, ("member", j, 0), member.task, [_key(s) for s in member.sources])
    tail = view_tail(group) if views else []
    for j, member in group.members_in("epilogue"):
        if j in tail:  # a view: its output is the buffer stored already, under another shape
            (source,) = member.sources
            rename_buffer(kernel, _key(source), ("member", j, 0), member.task.outputs[0].shape)
            continue
        chained = [k for k, s in enumerate(member.sources) if s.kind == "member"]
        if len(chained) != 1:
            raise FusionError(f"epilogue {member.name!r} reads {len(chained)} tensors of the group, not one")
        source = member.sources[chained[0]]
        graft_consumer(kernel, _key(source), member.task, chained[0],
                       [_key(s) for s in member.sources], ("member", j, 0))
    inputs = [("input", k) for k in range(group.num_inputs)]
    outputs = [("member", j, o) for j, o in group.outputs]
    fused = kernel.to_scheduled(inputs, outputs, name=f"fused_{kernel.name}")
    # outputs that may be written into a dying input's buffer (a residual): inplace.py
    return with_output_aliases(fused, len(inputs), len(outputs))
