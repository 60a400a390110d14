"""Hopper (sm_90a) warpgroup matrix multiply: wgmma.mma_async and its fences.

A warpgroup (4 consecutive warps, 128 threads) multiplies an m64 x nN x k16 tile whose
operands are read straight from shared memory through 64-bit *matrix descriptors*;
the fp32 accumulators stay in registers (N/2 per thread). The instruction is
asynchronous: ``wgmma_fence`` before the first one (registers and shared memory are
ready), ``wgmma_commit_group`` after a batch, ``wgmma_wait_group(n)`` before the
accumulators are read or an operand buffer is overwritten. Shared memory written by
ordinary stores or cp.async must be made visible to the async proxy first
(``fence_proxy_async``).

Descriptor (PTX ISA, "matrix descriptor format"): bits 0-13 start address >> 4,
16-29 leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset >> 4,
62-63 swizzle mode (1: 128-byte, 2: 64-byte, 3: 32-byte). The address depends on the
thread's data (IR); the rest is known on the host, so a `WgmmaOperand` carries the low
32 bits as IR and the high 32 bits as a host int, and the instruction's PTX joins them.

Layout of the accumulators (fp32, per thread t of the warpgroup, warp w = t // 32,
lane l = t % 32): register 4j + e holds row 16w + l // 4 + 8 (e // 2), column
8j + 2 (l % 4) + e % 2 of the m64 x nN tile (j < N / 8).

Building any of these makes the module need sm_90a; the CUDA build picks that arch
from the source (``nvrtc_build.needs_arch_specific``).
"""
from __future__ import annotations

from typing import Any

import attrs

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Expr, const
from hidet_framework.ir.stmt import AsmStmt

SWIZZLE_MODES = {0: 0, 128: 1, 64: 2, 32: 3}  # swizzle span in bytes -> descriptor code
WGMMA_N = tuple(range(8, 257, 8))
WGMMA_TYPES = {"float16": "f16", "bfloat16": "bf16"}


@attrs.frozen
class WgmmaOperand:
    """A shared-memory operand: descriptor bits 0-31 (IR, u32) and 32-63 (host int)."""

    low: Expr
    high: int


def wgmma_operand(smem_ptr: Any, leading_bytes: int, stride_bytes: int, swizzle_bytes: int = 128) -> WgmmaOperand:
    """The descriptor of the operand starting at `smem_ptr` (a pointer into or an
    element of a shared tensor). For K-major operands with a swizzle the leading
    offset is unused; MN-major ones use it for the distance between swizzle atoms along
    M or N, and the stride offset for the distance between 8-row groups along K."""
    from .lang import cvta_to_shared

    if swizzle_bytes not in SWIZZLE_MODES:
        raise ValueError(f"wgmma swizzle must be one of {sorted(SWIZZLE_MODES)} bytes, got {swizzle_bytes}")
    for what, value in (("leading", leading_bytes), ("stride", stride_bytes)):
        if value % 16 or not 0 <= value >> 4 < 1 << 14:
            raise ValueError(f"wgmma {what} byte offset must be a multiple of 16 below 256 KiB, got {value}")
    address = cvta_to_shared(smem_ptr)
    low = ((address & const(0x3FFFF, dtypes.uint32)) >> const(4, dtypes.uint32)) | \
        const((leading_bytes >> 4) << 16, dtypes.uint32)
    high = (stride_bytes >> 4) | (SWIZZLE_MODES[swizzle_bytes] << 30)
    return WgmmaOperand(low, high)


def wgmma_mma_async(acc: Any, a: WgmmaOperand, b: WgmmaOperand, n: int, dtype: str = "float16",
                    trans_a: bool = False, trans_b: bool = False) -> AsmStmt:
    """``acc += A @ B`` for one warpgroup, m64 x n`n` x k16, fp32 accumulation; A and B
    from shared memory (`trans_*`: the operand is MN-major, i.e. M or N contiguous).
    `acc`: n/2 f32 registers (a rank-1 register tensor, a slice, or a list)."""
    from .lang import _regs

    if n not in WGMMA_N:
        raise ValueError(f"wgmma N must be a multiple of 8 up to 256, got {n}")
    if dtype not in WGMMA_TYPES:
        raise ValueError(f"wgmma supports {sorted(WGMMA_TYPES)} here, got {dtype!r}")
    regs = _regs(acc, n // 2, "wgmma")
    k = len(regs)
    d_ops = ", ".join(f"%{i}" for i in range(k))
    t = WGMMA_TYPES[dtype]
    template = (
        "{\n.reg .b32 ha, hb;\n.reg .b64 da, db;\n.reg .pred p;\n"
        f"mov.b32 ha, {a.high};\nmov.b32 hb, {b.high};\n"
        f"mov.b64 da, {{%{k}, ha}};\nmov.b64 db, {{%{k + 1}, hb}};\n"
        f"setp.ne.b32 p, %{k + 2}, 0;\n"
        f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{d_ops}}}, da, db, p, 1, 1, "
        f"{int(trans_a)}, {int(trans_b)};\n}}")
    inputs = (("r", a.low), ("r", b.low), ("r", const(1, dtypes.int32)))
    return AsmStmt(template, tuple(("+f", r) for r in regs), inputs, True, ("memory",))


def wgmma_fence() -> AsmStmt:
    return AsmStmt("wgmma.fence.sync.aligned;", (), (), True, ("memory",))


def wgmma_commit_group() -> AsmStmt:
    return AsmStmt("wgmma.commit_group.sync.aligned;", (), (), True, ("memory",))


def wgmma_wait_group(n: int) -> AsmStmt:
    """Wait until at most `n` (a host int) committed wgmma groups are pending."""
    if not isinstance(n, int) or n < 0:
        raise TypeError(f"wgmma_wait_group needs a non-negative host int, got {n!r}")
    return AsmStmt(f"wgmma.wait_group.sync.aligned {n};", (), (), True, ("memory",))


def wgmma_pin_registers(acc: Any, count: int) -> AsmStmt:
    """An empty statement that reads and writes every accumulator register: keeps the
    compiler from moving their uses across the asynchronous wgmma window."""
    from .lang import _regs

    regs = _regs(acc, count, "wgmma_pin_registers")
    return AsmStmt("", tuple(("+f", r) for r in regs), (), True, ("memory",))


def fence_proxy_async() -> AsmStmt:
    """Make this thread's earlier shared-memory writes visible to the async proxy
    (wgmma reads through it); follow with a barrier before another thread's wgmma."""
    return AsmStmt("fence.proxy.async.shared::cta;", (), (), True, ("memory",))
