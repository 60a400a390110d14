"""A CPU schedule template for ``rowops.rowsum``, written in the kernel DSL.

Workers (OpenMP threads, as many as the target has cores) take blocks of `rows`
consecutive rows in turn; each row is summed by a serial loop the C compiler can
vectorise. The parameter space is the block size. It comes from the machine, not the
shape: a block is at most what fits the L1 data cache at the row lengths we expect,
and every candidate is correct for every shape (the last block is guarded).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.lang import attrs, f32, parallel, script, script_module
from hidet_framework.mapping.task_mapping import spatial
from hidet_framework.schedule import BufferRef, Launch, ScheduledTask, Template

from hidet_plugin_rowops.operators import ROWSUM


def build_rowsum(rows_total: int, cols: int, rows: int, workers: int) -> ScheduledTask:
    blocks = -(-rows_total // rows)
    rounds = -(-blocks // workers)  # worker w takes blocks w, w + workers, ...
    block_of = spatial(workers)

    @script
    def rowops_rowsum_cpu(x: f32[rows_total, cols], y: f32[rows_total]):
        attrs.func_kind = "cpu_kernel"
        for w in parallel(workers):
            for q in range(rounds):
                for s in block_of.on(w):
                    for r in range(rows):
                        i = (q * workers + s) * rows + r
                        if i < rows_total:
                            acc = 0.0
                            for k in range(cols):
                                acc += x[i, k]
                            y[i] = acc

    launch = Launch("rowops_rowsum_cpu", (BufferRef("input", 0), BufferRef("output", 0)))
    return ScheduledTask(script_module(rowops_rowsum_cpu, name="rowops_rowsum_cpu"), (launch,),
                         source="rowops.rowsum_cpu", params={"rows": rows})


class RowsumTemplate(Template):
    """float32 row sums on the CPU; space: rows per block."""

    name = "rowops.rowsum_cpu"
    operator = ROWSUM
    target = "cpu"
    version = "1"       # bump when the generated code changes: tuned results are redone
    priority = 0        # the highest-priority template gives the level-0 default

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return all(t.dtype.name == "float32" for t in list(task.inputs) + list(task.outputs))

    def space(self, target: Any, level: int) -> list[dict]:
        # Default first. Bigger blocks mean fewer, longer tasks per worker: fine for
        # many short rows; 1 balances few long rows. Level 0 keeps only the default.
        l1 = int(target.get("l1d_bytes") or 32 * 1024)
        sizes = [4, 1, 16, 64]
        return [{"rows": r} for r in sizes if r * 4 * 256 <= l1]  # blocks of 256-float rows fit L1

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
              target: Any) -> ScheduledTask:
        rows_total, cols = (int(s) for s in task.inputs[0].shape)
        return build_rowsum(rows_total, cols, int(params["rows"]), max(1, int(target.get("cores", 1))))
