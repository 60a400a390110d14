"""What a fusion group is: the operators that become one kernel, and how they connect.

A group has one anchor (the operator that is scheduled: a template or the
auto-scheduler), injective producers grafted onto its input loads (prologue) and
bijective consumers grafted onto its output stores (epilogue). The group is described
by tasks and wiring only (no graph tensors), so the grafting engine below the graph
can read it and the driver can key its cache on it.
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from hidet_framework.compute.task import Task

ROLES = ("prologue", "anchor", "epilogue")

# Set (True) in the attributes a template's `build` receives when the driver schedules
# the anchor of a fusion group: the kernel will be grafted, so it must read inputs and
# write outputs through element accesses only (a template may otherwise use vector
# accesses through element addresses, which no graft can rewrite).
ANCHOR_ATTRIBUTE = "fusion.anchor"
# Set (a tuple of input indices) beside it when prologue producers are grafted onto
# those inputs of the anchor: a template whose main kernel takes an input's address
# (cp.async) can then stage that input through a launch that reads it by element.
PROLOGUE_INPUTS_ATTRIBUTE = "fusion.prologue_inputs"


class FusionError(ValueError):
    """A graft is impossible (the caller falls back to separate kernels)."""


@attrs.frozen(eq=False)
class Source:
    """Where a member's input comes from: group input `index` (``kind == "input"``) or
    output 0 of member `index` (``kind == "member"``)."""

    kind: str = attrs.field(validator=attrs.validators.in_(("input", "member")))
    index: int


@attrs.frozen(eq=False)
class Member:
    """One operator of a group.

    :param name: the operator name (selects templates for the anchor).
    :param task: its task.
    :param attributes: the operator's attributes.
    :param role: ``prologue``, ``anchor`` or ``epilogue``.
    :param sources: one `Source` per task input.
    """

    name: str
    task: Task
    attributes: Mapping[str, Any]
    role: str = attrs.field(validator=attrs.validators.in_(ROLES))
    sources: tuple = attrs.field(converter=tuple)


@attrs.frozen(eq=False)
class FusionGroup:
    """Operators that run as one kernel.

    :param members: in topological order (producers before consumers).
    :param anchor: index of the anchor in `members`.
    :param outputs: the group outputs as (member index, output index) pairs.
    :param num_inputs: how many group inputs the members' `Source`s refer to.
    :param views: whether views ending the chain rename the anchor's buffer rather than
        graft (``view_epilogue.py``; decided by the partition from the target).
    """

    members: tuple = attrs.field(converter=tuple)
    anchor: int
    outputs: tuple = attrs.field(converter=tuple)
    num_inputs: int
    views: bool = attrs.field(default=False, kw_only=True)

    @property
    def anchor_member(self) -> Member:
        return self.members[self.anchor]

    def anchor_attributes(self, views: bool = True) -> dict:
        """What the anchor's template is built with: the operator's attributes,
        ANCHOR_ATTRIBUTE and, where prologues feed it, PROLOGUE_INPUTS_ATTRIBUTE (the
        attributes alone when only views follow it, ``view_epilogue.view_tail``, unless
        `views` is False)."""
        anchor = self.anchor_member
        fed = tuple(k for k, s in enumerate(anchor.sources)
                    if s.kind == "member" and self.members[s.index].role == "prologue")
        if not fed and views:
            from hidet_framework.fusion.view_epilogue import view_tail
            if view_tail(self):  # only views after it: nothing is grafted (view_epilogue.py)
                return dict(anchor.attributes)
        out = {**dict(anchor.attributes), ANCHOR_ATTRIBUTE: True}
        if fed:
            out[PROLOGUE_INPUTS_ATTRIBUTE] = fed
        return out

    def members_in(self, role: str) -> list[tuple[int, Member]]:
        return [(j, m) for j, m in enumerate(self.members) if m.role == role]

    def describe(self) -> str:
        """``relu -> [matmul] -> add -> gelu``: producers, the anchor, consumers."""
        parts = [f"[{m.name}]" if m.role == "anchor" else m.name for m in self.members]
        return " -> ".join(parts)

    def structure_key(self) -> tuple:
        """Everything that decides the fused kernel: roles, operator names, each
        member's task fingerprint (math, shapes and the attributes the operator records
        on its task) and the wiring."""
        members = tuple((m.role, m.name, m.task.fingerprint(), tuple((s.kind, s.index) for s in m.sources))
                        for m in self.members)
        return (members, self.anchor, self.outputs, self.num_inputs)


@attrs.frozen
class GroupReport:
    """How one operator of a compiled graph (a fused group or a lone operator) runs.

    :param operators: the operator names, producers first (the anchor in brackets).
    :param status: ``fused`` (one grafted kernel), ``separate`` (fell back: one kernel
        per operator), ``single`` (an operator that was not grouped), or ``in place``
        (a concat its inputs' producers write: no launch, ``runtime/concat_in_place.py``).
    :param launches: kernel launches it takes.
    :param scheduled_by: ``auto`` or the anchor template's name.
    :param reason: why a group fell back; for the others, why fusion stopped at their
        edges (a neighbour that reduces, is not a bijection, or a value stored because
        it is read twice or returned); empty when nothing stopped it.
    """

    operators: str
    status: str
    launches: int
    scheduled_by: str = ""
    reason: str = ""

    def __str__(self) -> str:
        text = f"{self.status:8s} {self.launches} launch{'es' if self.launches != 1 else ''}  {self.operators}"
        if self.scheduled_by:
            text += f"  ({self.scheduled_by})"
        return text + (f"  -- {self.reason}" if self.reason else "")
