"""A deliberately simple CPU matmul template, as a third party would write one.

One output row per OpenMP iteration, K in the middle and N innermost (so gcc can
vectorise the row update), and a tiny space: how many rows each worker takes at a time.
No packing and no register blocking: on large shapes the bundled packed template is
far faster, but on tiny ones this kernel has less set-up (no packing, one loop nest)
and can win. The tuner measures both and keeps the faster.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, local_tensor, parallel, script, script_module
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.tuner.template import Template

__all__ = ["SimpleRowMatmul"]


def _element_index(rank: int, batched: bool, b: Any, row: Any, col: Any) -> tuple:
    # The canonical matmul operand layout (2-D, or 3-D with a batch of 1 or `batch`).
    return (row, col) if rank == 2 else (b if batched else 0, row, col)


def build_simple_matmul(attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
    m, n, k, batch = (int(attributes[x]) for x in ("m", "n", "k", "batch"))
    a_rank, b_rank, out_rank = (int(attributes[x]) for x in ("a_rank", "b_rank", "out_rank"))
    a_batched, b_batched = bool(attributes["a_batched"]), bool(attributes["b_batched"])
    a_shape = ((batch if a_batched else 1), m, k) if a_rank == 3 else (m, k)
    b_shape = ((batch if b_batched else 1), k, n) if b_rank == 3 else (k, n)
    c_shape = (batch, m, n) if out_rank == 3 else (m, n)
    workers = max(1, int(target.get("cores", 1)))
    rows_per_task = int(params["rows"])
    tasks = -(-(batch * m) // rows_per_task)
    # Worker w takes tasks w, w + workers, ... (rows_per_task rows each): the round
    # number q is a loop (its extent grows with M; unrolled, the code would too), the
    # worker's place in a round comes from the spatial mapping.
    rounds = -(-tasks // workers)
    rows_of = spatial(workers)

    @script
    def matmul_simple_rows(a: f32[a_shape], b: f32[b_shape], c: f32[c_shape]):
        attrs.func_kind = "cpu_kernel"
        for w in parallel(workers):
            acc = local_tensor(f32, [max(n, 1)])
            for q in range(rounds):
              for s in rows_of.on(w):
                t = q * workers + s
                for r in range(rows_per_task):
                    flat = t * rows_per_task + r
                    if flat < batch * m:
                        bi = flat // m
                        i = flat % m
                        for j in range(n):
                            acc[j] = 0.0
                        for kk in range(k):
                            x = a[_element_index(a_rank, a_batched, bi, i, kk)]
                            for j in range(n):
                                acc[j] += x * b[_element_index(b_rank, b_batched, bi, kk, j)]
                        for j in range(n):
                            c[_element_index(out_rank, True, bi, i, j)] = acc[j]

    launch = Launch("matmul_simple_rows", (BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)))
    return ScheduledTask(script_module(matmul_simple_rows, name="matmul_simple_rows"), (launch,),
                         source="example.matmul_simple_rows", params=dict(params))


class SimpleRowMatmul(Template):
    """fp32 matmul, one row at a time per worker; space: rows per task (1, 4, 16)."""

    name = "example.matmul_simple_rows"
    operator = "matmul"
    target = "cpu"
    version = "1"
    priority = 0  # never the level-0 default over a bundled template

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return all(t.dtype.name == "float32" for t in list(task.inputs) + list(task.outputs))

    def space(self, target: Any, level: int) -> list[dict]:
        return [{"rows": r} for r in (4, 1, 16)]

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_simple_matmul(attributes, params, target)
