"""What the CPU templates of the pools, the global mean and the convolutions build alike
on the host, around their kernels: which tasks they take, how a pool reads its window
from the attributes, how output rows are shared out as items, and the ScheduledTask
around the one kernel each of them launches. The kernels themselves differ and stay
in their modules, but for one statement they trace alike: `clip_kernel_rows`.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.expr import const, minimum
from hidet_framework.ir.stmt import AssignStmt, IfStmt, Stmt, seq
from hidet_framework.lang import script_module
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

__all__ = ["float32_task", "CpuFloat32Template", "pool_window", "balanced_row_blocks", "one_kernel_task",
           "bias_buffers", "clip_kernel_rows"]


def float32_task(task: Any, rank: int | None = None) -> bool:
    """Every input and output of `task` is float32 (the kernels are written for it), and
    its first input has `rank` dimensions where `rank` is given (4: NCHW, 5: blocked)."""
    return all(t.dtype.name == "float32" for t in list(task.inputs) + list(task.outputs)) \
        and (rank is None or len(task.inputs[0].shape) == rank)


class CpuFloat32Template(Template):
    """What the CPU templates of this module's users declare alike: the target, version 1
    and priority 10 unless they say otherwise, and float32 tasks only (``rank``: of the
    first input, None for any), the form their kernels are written for."""

    target = "cpu"
    version = "1"
    priority = 10
    rank: int | None = None

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return float32_task(task, self.rank)


def pool_window(task: Any, attributes: Mapping[str, Any]) -> tuple:
    """A pool's shapes and window, as ints: ``(x_shape, y_shape, (OH, OW), (kh, kw),
    (sh, sw), (dh, dw), (top, left))`` (`pooling.Window2d`'s attributes; an average
    pool's dilation is 1). The bottom and right pads are the kernels' business where
    they need them (ceil mode, divisors)."""
    x_shape = tuple(int(d) for d in task.inputs[0].shape)
    y_shape = tuple(int(d) for d in task.outputs[0].shape)
    kh, kw = attributes["kernel"]
    sh, sw = attributes["stride"]
    dh, dw = attributes.get("dilation", (1, 1))
    top, left = attributes["pads"][0], attributes["pads"][1]
    return x_shape, y_shape, (y_shape[2], y_shape[3]), (kh, kw), (sh, sw), (dh, dw), (top, left)


def balanced_row_blocks(oh: int, rows: int) -> tuple[int, int]:
    """``(rb, blocks)``: OH output rows cut into blocks of at most `rows` (at least one,
    at most OH), then balanced: the same number of blocks, each ``ceil(OH / blocks)``
    rows but the last (36 rows by 32: two blocks of 18, not 32 and 4)."""
    rb = min(oh, max(1, rows))
    blocks = -(-oh // rb)
    return -(-oh // blocks), blocks


def one_kernel_task(kernel: Any, name: str, params: Mapping[str, Any]) -> ScheduledTask:
    """The ScheduledTask of a template whose one kernel `name` reads input 0 and writes
    output 0 (the pools and the global mean); its source is ``"ops." + name``."""
    return ScheduledTask(script_module(kernel, name=name),
                         (Launch(name, (BufferRef("input", 0), BufferRef("output", 0))),), (),
                         source=f"ops.{name}", params=dict(params))


def bias_buffers(has_bias: bool, no_bias_shape: tuple) -> tuple[tuple, tuple]:
    """The launch arguments ``(x, weights, bias, y)`` of a convolution kernel and its
    workspace: without a bias input, a workspace of `no_bias_shape` stands in for it
    (the kernel reads it only where it has one)."""
    refs = (BufferRef("input", 0), BufferRef("input", 1),
            BufferRef("input", 2) if has_bias else BufferRef("workspace", 0), BufferRef("output", 0))
    workspace = () if has_bias else (WorkspaceSpec("no_bias", "float32", no_bias_shape),)
    return refs, workspace


def clip_kernel_rows(kh_lo: Any, kh_hi: Any, ih0: Any, kh: int, h: int, dh: int) -> Stmt:
    """The statement that narrows the kernel rows ``kh_lo <= r < kh_hi`` of an output row
    whose window starts at input row `ih0` (negative in the top padding) to those whose
    input row ``ih0 + r * dh`` lies in the image (0 .. `h` - 1): a host helper called in
    a kernel's script body, after ``kh_lo = 0`` and ``kh_hi = kh``, which emits it there
    (docs/dsl.md, Statements). It builds what the kernels wrote inline, node for node,
    so the generated code is the same:

        if ih0 < 0:
            kh_lo = (dh - 1 - ih0) / dh
        if h - 1 - ih0 < 0:
            kh_hi = 0
        else:
            kh_hi = min(kh, (h - 1 - ih0) / dh + 1)
    """
    return seq(IfStmt(ih0 < 0, AssignStmt(kh_lo, (dh - 1 - ih0) / dh)),
               IfStmt(h - 1 - ih0 < 0, AssignStmt(kh_hi, const(0, "int32")),
                      AssignStmt(kh_hi, minimum(kh, (h - 1 - ih0) / dh + 1))))
