"""What scheduling produces: an IR module and the launches that run a task with it.

The auto-scheduler, every template candidate and the fusion engine hand this one form
to the driver, so the compiled graph runs any of them the same way: call each launch's
function in order with the task's input, output and workspace buffers.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import attrs

from hidet_framework.ir.dtypes import DataType, data_type
from hidet_framework.ir.func import IRModule


@attrs.frozen
class BufferRef:
    """An argument of a launch. :param kind: ``input``, ``output`` or ``workspace``.
    :param index: position within that kind."""

    kind: str = attrs.field(validator=attrs.validators.in_(("input", "output", "workspace")))
    index: int = 0


@attrs.frozen
class Launch:
    """Call `function` (a name in the module) with these buffers, then these scalars."""

    function: str
    buffers: tuple = attrs.field(converter=tuple)
    scalars: tuple = attrs.field(default=(), converter=tuple)


@attrs.frozen
class WorkspaceSpec:
    """A temporary buffer a task needs between its launches."""

    name: str
    dtype: DataType = attrs.field(converter=data_type)
    shape: tuple = attrs.field(converter=tuple)

    @property
    def nbytes(self) -> int:
        return math.prod(int(s) for s in self.shape) * self.dtype.nbytes


@attrs.frozen
class ScheduledTask:
    """A task made runnable on one target kind.

    :param module: the (not yet lowered) IR module.
    :param launches: calls in order.
    :param workspace: temporaries the launches share.
    :param source: who scheduled it (``auto`` or a template name), for reports.
    :param params: the template parameters of a template candidate.
    :param stores_once: the template's promise that its launches, over all threads,
        store every element of every output exactly once and never read an output
        back (what ``fusion/inplace.py`` needs before an output may take an input's
        buffer). False unless a template says so.
    :param output_aliases: ``(output, input)`` pairs proven safe to run in place
        (``fusion/inplace.py``): the kernels give the right result when that output is
        bound to that input's buffer; the compiled graph may then plan them in one.
    """

    module: IRModule
    launches: tuple = attrs.field(converter=tuple)
    workspace: tuple = attrs.field(default=(), converter=tuple)
    source: str = "auto"
    params: Any = None
    stores_once: bool = False
    output_aliases: tuple = attrs.field(default=(), converter=tuple)

    def bind(self, inputs: Sequence[Any], outputs: Sequence[Any],
             workspace: Sequence[Any] = ()) -> list[tuple[str, tuple, tuple]]:
        """(function name, buffer arguments, scalars) of each launch, in order, with
        every `BufferRef` resolved against these buffers (device arrays, or any keys:
        fusion binds parameters to names). The one place launches meet buffers."""
        pools = {"input": list(inputs), "output": list(outputs), "workspace": list(workspace)}
        return [(launch.function, tuple(pools[ref.kind][ref.index] for ref in launch.buffers), tuple(launch.scalars))
                for launch in self.launches]
