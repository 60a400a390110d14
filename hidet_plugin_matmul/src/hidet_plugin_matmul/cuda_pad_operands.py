"""The ``pad`` path of the tensor-core template: a first launch copies unaligned A (when
K % 8) and B into zero-filled workspace buffers whose rows are multiples of 8 elements,
so the main kernel can run the cp.async pipeline on them."""
from __future__ import annotations

from typing import Any

from hidet_framework.lang import attrs, script, static_range

from hidet_plugin_matmul.cuda_ir_builders import both, guarded_copy
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, unravel
from hidet_plugin_matmul.operators import MatmulOperands


def round8(x: int) -> int:
    return (x + 7) // 8 * 8


def padded_shapes(ops: MatmulOperands) -> tuple:
    """(A shape, B shape) of the operands the main kernel reads under "pad": K rounded
    up to 8 (A's and B's), N rounded up to 8 (B's); A is unchanged when K % 8 == 0."""
    kp, np_ = round8(ops.k), round8(ops.n)
    return ops.a_shape[:-1] + (kp,), ops.b_shape[:-2] + (kp, np_)


def build_pad_kernel(ops: MatmulOperands, dt: Any, name: str, per_thread: int = 4):
    """ap/bp = A/B with zero-filled columns (rows) up to the padded extents; reads are
    guarded tensor-element reads of A and B (fusible), writes coalesced. A is skipped
    (the launch passes A itself as ap, never touched) when K % 8 == 0."""
    from hidet_plugin_cuda import lang as cu

    ap_shape, bp_shape = padded_shapes(ops)
    pad_a = ops.k % 8 != 0
    total_a = _prod(ap_shape) if pad_a else 0
    total_b = _prod(bp_shape)
    per_block = 256 * per_thread
    blocks_a, blocks_b = ceil_div(total_a, per_block), ceil_div(total_b, per_block)
    n, k = ops.n, ops.k

    def copy_a(a, ap, idx):
        c = unravel(idx, ap_shape)
        return guarded_copy(ap[c], a[c], c[-1] < k)

    def copy_b(b, bp, idx):
        c = unravel(idx, bp_shape)
        return guarded_copy(bp[c], b[c], both(c[-2] < k, c[-1] < n))

    @script
    def pad_operands(a: dt[ops.a_shape], b: dt[ops.b_shape], ap: dt[ap_shape], bp: dt[bp_shape]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = blocks_a + blocks_b
        attrs.cuda.block_dim = 256
        if blocks_a > 0:
            if cu.blockIdx.x < blocks_a:
                for v in static_range(per_thread):
                    ia = cu.blockIdx.x * per_block + v * 256 + cu.threadIdx.x
                    if ia < total_a:
                        copy_a(a, ap, ia)
            else:
                for v in static_range(per_thread):
                    ib = (cu.blockIdx.x - blocks_a) * per_block + v * 256 + cu.threadIdx.x
                    if ib < total_b:
                        copy_b(b, bp, ib)
        else:
            for v in static_range(per_thread):
                ib = cu.blockIdx.x * per_block + v * 256 + cu.threadIdx.x
                if ib < total_b:
                    copy_b(b, bp, ib)

    return pad_operands


def _prod(shape: tuple) -> int:
    out = 1
    for x in shape:
        out *= x
    return out
