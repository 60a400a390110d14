"""IR builders the CUDA matmul kernels share: they emit statements and expressions while
a script kernel is traced (copies guarded only where the static shape leaves a doubt,
selections folded when the condition is known on the host), plus the block order
that the tensor-core templates offer as the ``raster`` parameter."""
from __future__ import annotations

from typing import Any


def block_tile(bx: Any, by: Any, grid_n: int, grid_m: int, group: int) -> tuple:
    """(M tile, N tile) of block (bx, by). group == 0: by, bx. Else blocks are numbered
    row by row (the order they are dispatched in) and that number walks down columns of
    `group` M tiles: the blocks resident at one time share fewer rows of A and columns
    of B, so more of each stays in L2 between them."""
    if group <= 1 or grid_m <= group:
        return by, bx
    lin = by * grid_n + bx
    per_group = group * grid_n
    first = lin // per_group * group
    within = lin % per_group
    if grid_m % group == 0:
        rows: Any = group
    else:  # the last group holds grid_m % group rows
        rows = select(first + group <= grid_m, group, grid_m - first)
    return first + within % rows, within // rows


def guard(conditions: list) -> Any:
    """The conjunction of the conditions not known true: (known true, condition) pairs."""
    left = [cond for known, cond in conditions if not known]
    if not left:
        return True
    out = left[0]
    for cond in left[1:]:
        out = both(out, cond)
    return out


def grid3(a: int, b: int, c: int) -> list[tuple]:
    return [(x, y, z) for x in range(a) for y in range(b) for z in range(c)]


def both(x: Any, y: Any) -> Any:
    from hidet_framework.ir.expr import logical_and

    if isinstance(x, bool) and isinstance(y, bool):  # host values (a gather emulated on ints)
        return x and y
    return logical_and(x, y)


def select(cond: Any, a: Any, b: Any) -> Any:
    from hidet_framework.ir.expr import IfThenElse, convert

    if isinstance(cond, bool):  # known while tracing
        return a if cond else b
    return IfThenElse(convert(cond), convert(a), convert(b))


def seq_of(stmts: list) -> Any:
    from hidet_framework.ir.stmt import seq

    return seq(*stmts)


def store(dst: Any, value: Any) -> Any:
    from hidet_framework.ir.stmt import BufferStoreStmt

    return BufferStoreStmt(dst.base, dst.indices, value)


def guarded_copy(dst: Any, src: Any, cond: Any) -> Any:
    """dst = src where cond, else dst = 0 (in dst's dtype): the read happens only in range."""
    from hidet_framework.ir.expr import const
    from hidet_framework.ir.stmt import IfStmt
    from hidet_framework.ir.type_infer import infer_type

    zero = const(0.0, infer_type(dst))
    return IfStmt(cond, store(dst, src), store(dst, zero))


def cp_async_tile(smem: Any, stage_offset: Any, offsets: Any, plan: Any, deltas: list, row0: Any, col0: Any,
                  extents: tuple, whole: tuple, element: Any) -> Any:
    """The cp.async 16-byte copies one thread makes of a tile: for delta (di, dj), the
    global element ``element(row0 + di, col0 + dj)`` goes to shared memory at
    ``smem[stage_offset + offsets[base] + const]`` (`plan`: cuda_smem_offsets).
    Chunks outside `extents` (rows, cols) are zero-filled and read nothing (their
    source clamped to element 0); `whole` (rows, cols) says which bound the static
    shape already guarantees, so no guard is emitted for it."""
    from hidet_plugin_cuda import lang as cu

    out = []
    for t, (di, dj) in enumerate(deltas):
        base, const = plan.uses[t]
        row, col = row0 + di, col0 + dj
        ok = guard([(whole[0], row < extents[0]), (whole[1], col < extents[1])])
        src = element(select(ok, row, 0), select(ok, col, 0))
        out.append(cu.cp_async(smem[stage_offset + offsets[base] + const], src, 16, select(ok, 16, 0), "cg"))
    return seq_of(out)

