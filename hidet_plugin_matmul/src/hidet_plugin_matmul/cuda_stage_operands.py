"""Operand staging for a fusion anchor whose main kernel reads A or B with cp.async.

cp.async takes the address of an operand's element, so no prologue can be grafted onto
those reads (the fusion engine refuses, and the whole group then runs one kernel per
member: a GELU chain before a matmul became 8-12 launches). When the driver says that
prologue producers feed inputs of the anchor (``fusion.prologue_inputs``), the
tensor-core template adds a first launch that copies those operands, by element reads
(the prologue is grafted there, computed once per element), into workspace buffers of
the same shape; the main kernel, unchanged, runs its cp.async pipeline on the copies.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.lang import attrs, script, static_range

from hidet_plugin_matmul.cuda_matmul_common import ceil_div, unravel
from hidet_plugin_matmul.operators import MatmulOperands

PER_THREAD = 4


def prologue_inputs(attributes: Mapping[str, Any]) -> tuple:
    """The anchor inputs (0: A, 1: B) that grafted prologues feed, from the driver's
    attribute (empty outside fusion groups)."""
    try:
        from hidet_framework.fusion.plan import PROLOGUE_INPUTS_ATTRIBUTE
    except ImportError:  # pragma: no cover - a core without the attribute
        return ()
    return tuple(sorted(int(i) for i in attributes.get(PROLOGUE_INPUTS_ATTRIBUTE, ()) if int(i) in (0, 1)))


def _prod(shape: tuple) -> int:
    out = 1
    for x in shape:
        out *= x
    return out


def build_stage_kernel(ops: MatmulOperands, dt: Any, name: str, stage_a: bool, stage_b: bool):
    """sa = A (when `stage_a`), sb = B (when `stage_b`), element by element: tensor-element
    reads (fusible), coalesced writes. An operand not staged is passed as its own copy
    and never touched."""
    from hidet_plugin_cuda import lang as cu

    total_a = _prod(ops.a_shape) if stage_a else 0
    total_b = _prod(ops.b_shape) if stage_b else 0
    per_block = 256 * PER_THREAD
    blocks_a, blocks_b = ceil_div(total_a, per_block), ceil_div(total_b, per_block)

    @script
    def stage_operands(a: dt[ops.a_shape], b: dt[ops.b_shape], sa: dt[ops.a_shape], sb: dt[ops.b_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = blocks_a + blocks_b
        attrs.cuda.block_dim = 256
        if cu.blockIdx.x < blocks_a:
            for v in static_range(PER_THREAD):
                ia = cu.blockIdx.x * per_block + v * 256 + cu.threadIdx.x
                if ia < total_a:
                    ca = unravel(ia, ops.a_shape)
                    sa[ca] = a[ca]
        else:
            for v in static_range(PER_THREAD):
                ib = (cu.blockIdx.x - blocks_a) * per_block + v * 256 + cu.threadIdx.x
                if ib < total_b:
                    cb = unravel(ib, ops.b_shape)
                    sb[cb] = b[cb]

    return stage_operands
