"""The CUDA templates of the reduce plugin: rows (``cuda_rows.py``: every family over
innermost axes) and columns (``cuda_columns.py``: reductions over non-innermost
axes). Each operator name gets one template of each kind it can use; both read their
space from the target (``cuda_space.py``).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask
from hidet_framework.schedule.template import Template

from .cuda_space import columns_space, row_plan, rows_space
from .row_access import FAMILIES, RowAccess

__all__ = ["CudaRowTemplate", "CudaColumnTemplate", "in_fusion_group"]

# dtypes whose accumulator a warp shuffle moves (integers accumulate in their own type)
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")


def in_fusion_group(attributes: Mapping[str, Any]) -> bool:
    """Whether the driver schedules this operator as the anchor of a fusion group (the
    kernel must then touch its tensors only through element accesses)."""
    try:
        from hidet_framework.fusion.plan import ANCHOR_ATTRIBUTE
    except ImportError:  # an older core: every schedule must take grafts
        return True
    return bool(attributes.get(ANCHOR_ATTRIBUTE, False))


def _common_applies(operator: str, task: Any, attributes: Mapping[str, Any]) -> bool:
    if not attributes.get("contiguous") or int(attributes.get("extent", 0)) < 1:
        return False
    if any(int(s) == 0 for s in attributes.get("shape", ())) or len(task.outputs) != 1:
        return False
    return task.inputs[0].dtype.name in _DTYPES


class _CudaOperatorTemplate(Template):
    """What the CUDA templates here declare alike: one instance per operator, named
    ``reduce.<form>.<operator>``, for cuda, version 1, priority 10."""

    target = "cuda"
    version = "1"
    priority = 10
    form = ""

    def __init__(self, operator: str) -> None:
        self.operator = operator
        self.name = f"reduce.{self.form}.{operator}"


class CudaRowTemplate(_CudaOperatorTemplate):
    """Rows over innermost axes: a row per warp (short rows) or per block part."""

    form = "cuda_rows"

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return _common_applies(self.operator, task, attributes) and int(attributes["inner"]) == 1

    def space(self, target: Any, level: int) -> list[dict]:
        return rows_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        from .cuda_rows import build_rows_kernel

        acc = RowAccess(self.operator, attributes)
        x = task.inputs[0]
        graft = in_fusion_group(attributes)
        # vector accesses need rows on 16-byte boundaries and plain row-major rows
        vector_ok = not graft and not acc.grouped
        plan = row_plan(dict(params), acc.extent, x.dtype.nbytes, target, vector_ok)
        if acc.family == "arg":
            plan["cached"] = False
        if acc.family == "reduce":
            from .cuda_columns import build_split_rows, split_rows_parts

            parts = split_rows_parts(acc.outer, acc.extent, plan["vec"], 256, target)
            if parts > 1:  # few long rows: several blocks per row, then a combining kernel
                return build_split_rows(self.operator, task, attributes, params, target, graft, self.name, parts,
                                        plan["vec"])
        name = f"{self.operator}_cuda_rows_t{plan['threads']}_r{plan['rows_per_block']}_v{plan['vec']}" \
               f"{'_c' if plan['cached'] else '_s'}"
        module = build_rows_kernel(acc, task, plan, name, graft, attributes)
        buffers = [BufferRef("input", k) for k in range(len(task.inputs))] + [BufferRef("output", 0)]
        return ScheduledTask(module, (Launch(name, tuple(buffers)),), (), source=self.name,
                             params={**dict(params), "plan": plan})


class CudaColumnTemplate(_CudaOperatorTemplate):
    """Reductions over non-innermost axes: coalesced along the inner axis, split over
    blocks (with a second, combining kernel) when the grid would not fill the GPU."""

    form = "cuda_columns"

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return (_common_applies(self.operator, task, attributes) and int(attributes["inner"]) > 1
                and FAMILIES[self.operator] == "reduce")

    def space(self, target: Any, level: int) -> list[dict]:
        return columns_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        from .cuda_columns import build_columns

        return build_columns(self.operator, task, attributes, params, target, in_fusion_group(attributes), self.name)


class CudaScanTemplate(_CudaOperatorTemplate):
    """cumsum: one thread per (row, column) runs the scan; consecutive threads take
    consecutive columns, so with ``inner > 1`` every step is a coalesced warp access
    (over the innermost axis each thread walks its own row: correct, not fast)."""

    form = "cuda_scan"

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return _common_applies(self.operator, task, attributes)

    def space(self, target: Any, level: int) -> list[dict]:
        out = [{"block": 256}]
        return out if level == 0 else out + [{"block": 128}, {"block": 512}]

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        from .cuda_columns import build_scan

        return build_scan(task, attributes, params, self.name)


def cuda_templates() -> dict[str, Template]:
    out: dict[str, Template] = {}
    for operator, family in FAMILIES.items():
        if family == "scan":
            out[f"reduce.cuda_scan.{operator}"] = CudaScanTemplate(operator)
            continue
        out[f"reduce.cuda_rows.{operator}"] = CudaRowTemplate(operator)
        if family == "reduce":
            out[f"reduce.cuda_columns.{operator}"] = CudaColumnTemplate(operator)
    return out
