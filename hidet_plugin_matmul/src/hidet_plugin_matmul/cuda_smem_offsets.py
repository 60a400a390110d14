"""Shared-memory offsets a kernel computes once, outside its main loop.

A swizzled layout maps (row, col) to an offset with XORs; recomputing that for every
copy and every ldmatrix inside the k-loop costs more integer instructions than the
tensor cores can hide. But most of a thread's accesses differ from another of its own
accesses by a constant (rows a whole swizzle period apart, the next k-step...). This
module finds, on the host and for every thread, which accesses share a base:

    plan = plan_offsets(layout, origin, deltas, threads)

`origin(t)` gives thread t's first coordinates (host ints; the same Python function,
given IR, gives the kernel's expressions) and `deltas` the host coordinate offsets of
its accesses. Access d is ``offset(base b) + const`` for all threads; the kernel keeps
one int register per base. Checked exhaustively over the threads, so it is exact.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import attrs


@attrs.frozen
class OffsetPlan:
    """bases: the deltas whose offsets are computed (one register each);
    uses[d] = (base index, constant) for delta d."""

    bases: tuple
    uses: tuple


def plan_offsets(layout: Any, origin: Callable[[Any], tuple], deltas: Sequence[tuple], threads: int) -> OffsetPlan:
    coords = tuple(tuple(origin(t)) for t in range(threads))
    key = (layout, coords, tuple(tuple(d) for d in deltas))
    plan = _PLANS.get(key)
    if plan is None:  # candidates of one tile shape share their plans (some 5% of building one)
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        plan = _PLANS[key] = _plan(layout, coords, deltas)
    return plan


_PLANS: dict = {}  # (layout, thread coordinates, deltas) -> OffsetPlan; layouts compare by value


def _plan(layout: Any, coords: tuple, deltas: Sequence[tuple]) -> OffsetPlan:
    def offsets(delta: tuple) -> list[int]:
        return [layout.offset(*(c + d for c, d in zip(o, delta))) for o in coords]

    bases: list[tuple] = []
    base_offsets: list[list[int]] = []
    uses = []
    for delta in deltas:
        mine = offsets(delta)
        for b, theirs in enumerate(base_offsets):
            diff = mine[0] - theirs[0]
            if all(x - y == diff for x, y in zip(mine, theirs)):
                uses.append((b, diff))
                break
        else:
            uses.append((len(bases), 0))
            bases.append(tuple(delta))
            base_offsets.append(mine)
    return OffsetPlan(tuple(bases), tuple(uses))


def base_offset_exprs(layout: Any, origin_ir: tuple, plan: OffsetPlan) -> list[Any]:
    """The IR offset of each base for the running thread (origin given as IR)."""
    return [layout(*(o + d for o, d in zip(origin_ir, delta))) for delta in plan.bases]


@attrs.frozen
class TileCopy:
    """How `threads` threads copy a (rows, cols) tile into `layout` in chunks of `vec`
    elements along cols, spread by ``auto_map``: thread t starts at ``origin(t)`` and
    visits ``origin + delta`` for each of `deltas`; `plan` shares its offset registers."""

    mapping: Any
    vec: int
    deltas: tuple
    plan: OffsetPlan

    def origin(self, t: Any) -> tuple:
        from hidet_plugin_matmul.cuda_matmul_common import worker_origin

        i, j = worker_origin(self.mapping, t)
        return i, j * self.vec

    def store_offsets(self, regs: Any, layout: Any, t: Any) -> Any:
        """The statements giving thread `t`'s offset registers `regs` (one per base of
        `plan`) their values in `layout`."""
        from hidet_plugin_matmul.cuda_ir_builders import seq_of, store

        return seq_of([store(regs[k], e) for k, e in enumerate(base_offset_exprs(layout, self.origin(t), self.plan))])


def tile_copy(layout: Any, rows: int, cols: int, threads: int, vec: int) -> TileCopy:
    from hidet_framework.mapping.task_mapping import auto_map
    from hidet_plugin_matmul.cuda_matmul_common import static_tasks

    mapping = auto_map(rows, cols // vec, workers=threads)
    deltas = tuple((i, j * vec) for i, j in static_tasks(mapping))
    partial = TileCopy(mapping, vec, deltas, OffsetPlan((), ()))
    return attrs.evolve(partial, plan=plan_offsets(layout, partial.origin, deltas, threads))

