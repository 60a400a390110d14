"""How the auto-scheduler's kernels run on the GPU (``CudaBackend.auto_schedule_kernel``):
one thread per output element, in blocks of `CUDA_BLOCK` threads, a bounds check for
the last block."""
from __future__ import annotations

import math

from hidet_framework.ir.expr import cast, const, var
from hidet_framework.ir.func import Function
from hidet_framework.ir.stmt import IfStmt, LetStmt
from hidet_framework.schedule.auto_scheduler import StageKernel, block_idx_x, thread_idx_x

CUDA_BLOCK = 256


def cuda_stage_kernel(stage: StageKernel) -> Function:
    shape = stage.shape
    total = math.prod(shape)
    itype = stage.index_dtype(total)
    w = var("w", itype)
    flat = cast(block_idx_x(), itype) * CUDA_BLOCK + cast(thread_idx_x(), itype)
    body = stage.bind_axes(stage.unravel(w, shape), stage.store(list(stage.axes)))
    body = LetStmt(w, flat, IfStmt(w < const(total, itype), body))
    grid = (max(1, (total + CUDA_BLOCK - 1) // CUDA_BLOCK),)
    return Function(stage.name, stage.params, body, kind="cuda_kernel",
                    attrs={"grid_dim": grid, "block_dim": (CUDA_BLOCK,)})
