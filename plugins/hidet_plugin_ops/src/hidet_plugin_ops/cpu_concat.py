"""concat on the CPU: one row of the joined axis at a time, copied from the input that holds it.

The auto-scheduler's kernel runs threads over every dimension but the last and, per
last-dimension run, picks the input by comparing the joined index: with a short last
dimension that is the cost (a channel-blocked ``[1, 18, 35, 35, 16]`` concat of four
inputs: three integer divisions and the compare chain per 16 floats, 88 us a call on one
Zen 4 thread against 42 for the same bytes in NCHW). This kernel (45 us there)::

    parallel over rows p = (outer index, position c along the joined axis):
        the input k holding c (a compare chain once a row)
        for each index i after the axis (nested loops, the last innermost):
            y[outer, c, i] = x_k[outer, c - offset_k, i]

Applies where the last dimension is one of the target's vectors or less (the blocked
layout's lanes; a plane of 16 or fewer columns) and the run after the axis at least
MIN_VECTORS vectors, every input of the output's dtype; elsewhere the auto-scheduler's
kernel, whose runs are long enough (NCHW concats of 35x35 and 17x17 planes: the same
time within noise, measured both ways). It serves a concat launched alone (Inception's,
between convolutions): an injective tree around a concat is fused into one
auto-scheduled kernel before templates are asked.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import BinaryOp, TensorElement, const, var
from hidet_framework.ir.func import Function, module
from hidet_framework.ir.stmt import BufferStoreStmt, ForStmt, IfStmt, LetStmt
from hidet_framework.schedule.auto_scheduler import StageKernel
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

__all__ = ["CpuConcatRows", "build_concat_rows", "MIN_VECTORS"]

MIN_VECTORS = 4      # the run after the joined axis, in the target's vectors, at least


def _geometry(task: Any, attributes: Mapping[str, Any]) -> tuple:
    shape = tuple(int(d) for d in task.outputs[0].shape)
    axis = int(attributes["axis"])
    parts = [(k, int(t.shape[axis])) for k, t in enumerate(task.inputs) if int(t.shape[axis]) > 0]
    return shape, axis, parts


def applies_to(task: Any, attributes: Mapping[str, Any], target: Any) -> bool:
    out = task.outputs[0]
    shape, axis, parts = _geometry(task, attributes)
    vector_bytes = max(1, int(target.get("vector_bits", 256)) // 8)
    inner = math.prod(shape[axis + 1:])
    return bool(parts) and all(t.dtype.name == out.dtype.name for t in task.inputs) and math.prod(shape) > 0 \
        and shape[-1] * out.dtype.nbytes <= vector_bytes and inner * out.dtype.nbytes >= MIN_VECTORS * vector_bytes


def build_concat_rows(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                      target: Any) -> ScheduledTask:
    shape, axis, parts = _geometry(task, attributes)
    y = task.outputs[0]
    rows = math.prod(shape[:axis + 1])
    itype = dtypes.int32 if math.prod(shape) < 2 ** 31 else dtypes.int64
    p, c = var("p", itype), var("c", itype)
    outer = StageKernel.unravel(p, shape[:axis + 1])       # the outer indices, then c's value
    head = outer[:-1] + [c]
    tail = [var(f"i{d}", itype) for d in range(axis + 1, len(shape))]
    body = None
    offset = sum(n for _, n in parts)
    for k, n in reversed(parts):
        offset -= n
        x = task.inputs[k]
        src = head[:-1] + [BinaryOp("sub", c, const(offset, itype)) if offset else c] + tail
        copy = BufferStoreStmt(y, head + tail, TensorElement(x, src))
        for v, extent in reversed(list(zip(tail, shape[axis + 1:]))):
            copy = ForStmt(v, const(extent, itype), copy)
        body = copy if body is None else IfStmt(BinaryOp("lt", c, const(offset + n, itype)), copy, body)
    body = LetStmt(c, outer[-1], body)
    name = f"{task.name}_rows"
    fn = Function(name, list(task.inputs) + [y], ForStmt(p, const(rows, itype), body, parallel=True),
                  kind="cpu_kernel")
    refs = tuple(BufferRef("input", k) for k in range(len(task.inputs))) + (BufferRef("output", 0),)
    return ScheduledTask(module(task.name, [fn]), (Launch(name, refs),), (), source="ops.concat_cpu_rows",
                         params=dict(params))


class CpuConcatRows(Template):
    """``concat`` on the CPU, a row of the joined axis at a time (module docstring)."""

    name = "ops.concat_cpu_rows"
    operator = "concat"
    target = "cpu"
    version = "1"
    priority = 10

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        """Asked without a target (not by the driver): this machine's."""
        from hidet_framework.extension import plugin_host

        return applies_to(task, attributes, plugin_host().backend_for("cpu").detect_target())

    def applies_on(self, task: Any, attributes: Mapping[str, Any], target: Any) -> bool:
        """For a build for `target`: its vector width, not this machine's."""
        return applies_to(task, attributes, target)

    def space(self, target: Any, level: int) -> list[dict]:
        return [{}]

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_concat_rows(task, attributes, params, target)
