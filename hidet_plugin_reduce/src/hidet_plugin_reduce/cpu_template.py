"""The CPU template of every reduce-plugin operator that has a row form: the norm
kernel (layer, rms, instance, group norm) and the `Template` that picks the kernel of
an operator's family (kernels of the other families: ``cpu_rows.py``).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast
from hidet_framework.ir.func import Function
from hidet_framework.ir.math_functions import rsqrt
from hidet_framework.ir.types import TensorType
from hidet_framework.lang import attrs, local_tensor, parallel, script, script_module
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

from .cpu_rows import (
    arg_scan_kernel, cpu_facts, cpu_space, deal_column_tiles, deal_rows, halves, reduce_columns_kernel,
    reduce_rows_kernel, softmax_rows_kernel, tasks_for,
)
from .row_access import FAMILIES, RowAccess, accumulator_dtype

__all__ = ["CpuRowTemplate", "build_cpu"]


def _norm_rows(acc: RowAccess, xt, st, bt, yt, p: Mapping[str, Any], name: str, epsilon: float, has_bias: bool):
    """Pass 1: the mean, as pivot + mean(x - pivot) (layer/instance/group norm); pass 2:
    the variance of deviations (rms_norm: the mean square); pass 3: the output."""
    workers, lanes = int(p["workers"]), int(p["lanes"])
    outer, extent = acc.outer, acc.extent
    blocks = extent // lanes
    rows = deal_rows(workers, outer, p["order"])
    steps = halves(lanes)
    chain = 1 if steps else lanes
    f32 = dtypes.float32
    centered = acc.kind != "rms_norm"
    inv_count = 1.0 / extent

    @script
    def norm_rows(x: xt, scale: st, bias: bt, y: yt):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(rows.workers):
            part = local_tensor(f32, [lanes])
            for slot in rows.slots.on(w):
                for k in range(rows.per_worker):
                    row = rows.row(slot, k)
                    if row < outer:
                        mean = 0.0
                        if centered:
                            pivot = acc.load(x, f32, row, 0)
                            for j in range(lanes):
                                part[j] = 0.0
                            for rb in range(blocks):
                                for j in range(lanes):
                                    part[j] = part[j] + (acc.load(x, f32, row, rb * lanes + j) - pivot)
                            for r in range(blocks * lanes, extent):
                                part[0] = part[0] + (acc.load(x, f32, row, r) - pivot)
                            for h in steps:
                                for j in range(h):
                                    part[j] = part[j] + part[j + h]
                            total = part[0]
                            for j in range(1, chain):
                                total = total + part[j]
                            mean = pivot + total * inv_count
                        for j in range(lanes):
                            part[j] = 0.0
                        for rb in range(blocks):
                            for j in range(lanes):
                                d = acc.load(x, f32, row, rb * lanes + j) - mean
                                part[j] = part[j] + d * d
                        for r in range(blocks * lanes, extent):
                            d = acc.load(x, f32, row, r) - mean
                            part[0] = part[0] + d * d
                        for h in steps:
                            for j in range(h):
                                part[j] = part[j] + part[j + h]
                        sq = part[0]
                        for j in range(1, chain):
                            sq = sq + part[j]
                        rstd = rsqrt(sq * inv_count + epsilon)
                        for r in range(extent):
                            v = (acc.load(x, f32, row, r) - mean) * rstd * acc.load_param(scale, f32, row, r)
                            if has_bias:
                                v = v + acc.load_param(bias, f32, row, r)
                            acc.store(y, v, row, r)

    return norm_rows


def _scan(acc: RowAccess, xt, yt, adt, p: Mapping[str, Any], name: str, exclusive: bool, reverse: bool):
    """cumsum: one running sum per (row, column); with columns (``inner > 1``) the
    lanes run along the contiguous inner axis, so the scan is vectorised across them."""
    workers, lanes = int(p["workers"]), int(p["lanes"])
    outer, extent, inner = acc.outer, acc.extent, acc.inner
    width = lanes if inner > 1 else 1
    tiles, items, work = deal_column_tiles(workers, outer, inner, width, p["order"])

    @script
    def scan_rows(x: xt, y: yt):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(work.workers):
            run = local_tensor(adt, [width])
            for slot in work.slots.on(w):
                for k in range(work.per_worker):
                    item = work.row(slot, k)
                    if item < items:
                        o = item / tiles
                        i0 = (item % tiles) * width
                        count = min(width, inner - i0)
                        for j in range(width):
                            run[j] = cast(0, adt)
                        for t in range(extent):
                            r = extent - 1 - t if reverse else t
                            for j in range(count):
                                if exclusive:
                                    acc.store(y, run[j], o, r, i0 + j)
                                    run[j] = run[j] + acc.load(x, adt, o, r, i0 + j)
                                else:
                                    run[j] = run[j] + acc.load(x, adt, o, r, i0 + j)
                                    acc.store(y, run[j], o, r, i0 + j)

    return scan_rows


def _without_param(fn: Any, index: int) -> Any:
    """The script function's IR with parameter `index` (unused) removed."""
    ir = fn.ir if hasattr(fn, "ir") else fn
    params = [q for k, q in enumerate(ir.params) if k != index]
    return Function(ir.name, params, ir.body, ir.kind, ir.ret_type, ir.attrs)


def build_cpu(operator: str, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
              target: Any) -> ScheduledTask:
    acc = RowAccess(operator, attributes)
    x, y = task.inputs[0], task.outputs[0]
    xt, yt = TensorType(x.dtype, x.shape), TensorType(y.dtype, y.shape)
    name = f"{operator}_cpu_{acc.family}"
    adt = accumulator_dtype(x.dtype)
    family = acc.family
    workspace: tuple = ()
    buffers = [BufferRef("input", 0), BufferRef("output", 0)]
    if family == "reduce":
        fn = (reduce_rows_kernel if acc.inner == 1 else reduce_columns_kernel)(acc, xt, yt, adt, params, name)
        module = script_module(fn, name=name)
    elif family == "arg":
        fn = arg_scan_kernel(acc, xt, yt, adt, params, name, bool(attributes.get("select_last_index", False)))
        module = script_module(fn, name=name)
    elif family == "scan":
        fn = _scan(acc, xt, yt, adt, params, name, bool(attributes.get("exclusive")), bool(attributes.get("reverse")))
        module = script_module(fn, name=name)
    elif family == "softmax":
        # the own exp-and-sum pass and vector lane reductions where vectors are 512-bit (AVX-512)
        own_math = cpu_facts(target)["lanes"] >= 16
        fn = softmax_rows_kernel(acc, xt, yt, params, name, own_math=own_math)
        module = script_module(fn, name=name)
        workspace = (WorkspaceSpec("exp_rows", "float32", (tasks_for(int(params["workers"]), acc.outer) * acc.extent,)),)
        buffers.append(BufferRef("workspace", 0))
    else:
        has_bias = len(task.inputs) == 3
        s = task.inputs[1]
        b = task.inputs[2] if has_bias else s
        st, bt = TensorType(s.dtype, s.shape), TensorType(b.dtype, b.shape)
        fn = _norm_rows(acc, xt, st, bt, yt, params, name, float(attributes["epsilon"]), has_bias)
        ir = fn.ir if has_bias else _without_param(fn, 2)
        from hidet_framework.ir.func import module as ir_module

        module = ir_module(name, [ir])
        buffers = [BufferRef("input", k) for k in range(len(task.inputs))] + [BufferRef("output", 0)]
    launch = Launch(name, tuple(buffers))
    return ScheduledTask(module, (launch,), workspace, source=f"reduce.cpu.{operator}", params=dict(params))


class CpuRowTemplate(Template):
    """One operator of the reduce plugin on the CPU (see cpu_rows.py)."""

    target = "cpu"
    version = "1"
    priority = 10

    def __init__(self, operator: str) -> None:
        self.operator = operator
        self.name = f"reduce.cpu.{operator}"

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        if not attributes.get("contiguous") or int(attributes.get("extent", 0)) < 1:
            return False
        if any(int(s) == 0 for s in attributes.get("shape", ())):
            return False
        if len(task.outputs) != 1 or task.inputs[0].dtype.is_bool():
            return False  # layer_norm's statistics outputs, any/all of bools: the auto-scheduler
        family = FAMILIES[self.operator]
        if family in ("softmax", "norm") and int(attributes["inner"]) != 1:
            return False  # a softmax over a non-innermost axis: the auto-scheduler
        return True

    def space(self, target: Any, level: int) -> list[dict]:
        return cpu_space(target, level)

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        return build_cpu(self.operator, task, attributes, params, target)
