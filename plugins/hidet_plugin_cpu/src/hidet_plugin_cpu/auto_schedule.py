"""How the auto-scheduler's kernels run on the CPU (``CpuBackend.auto_schedule_kernel``):
OpenMP threads over the leading dimensions (all of a 1-D output), a serial innermost
loop over the last one, which the C compiler vectorises."""
from __future__ import annotations

import math

from hidet_framework.ir.expr import const, var
from hidet_framework.ir.func import Function
from hidet_framework.ir.stmt import ForStmt
from hidet_framework.schedule.auto_scheduler import StageKernel


def cpu_stage_kernel(stage: StageKernel) -> Function:
    shape = stage.shape
    element = stage.store(list(stage.axes))
    if not shape:
        return Function(stage.name, stage.params, element, kind="cpu_kernel")
    total = math.prod(shape)
    itype = stage.index_dtype(total)
    j = var("j", itype)
    if len(shape) == 1:
        body = ForStmt(j, const(shape[0], itype), stage.bind_axes([j], element), parallel=True)
        return Function(stage.name, stage.params, body, kind="cpu_kernel")
    p = var("p", itype)
    inner = ForStmt(j, const(shape[-1], itype), stage.bind_axes(stage.unravel(p, shape[:-1]) + [j], element))
    body = ForStmt(p, const(total // shape[-1], itype), inner, parallel=True)
    return Function(stage.name, stage.params, body, kind="cpu_kernel")
