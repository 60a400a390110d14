"""CUDA vocabulary for script kernels: worker indices, barriers, warp shuffles, atomics,
streaming (evict-first) global loads and stores,
math, dynamic shared memory, and tensor-core / async-copy instructions.

    from hidet_plugin_cuda.lang import threadIdx, blockIdx, syncthreads, cp_async, mma_sync_m16n8k16_f16_f32

    @script
    def k(a: f32[n], ...):
        attrs.func_kind = "cuda_kernel"
        i = blockIdx.x * 256 + threadIdx.x

How the instructions are made: everything whose operands are *registers written by
the instruction* (ldmatrix, mma.sync) or that orders memory (cp.async and its groups)
is built here as an IR ``AsmStmt`` holding the PTX, with the register operands as IR
lvalues (elements of register tensors). A script kernel writes the call as a statement
(``mma_sync_m16n8k16_f16_f32(acc, a_frag, b_frag, acc)``); the tracer emits the returned
statement, and the code generator prints ``asm volatile("mma.sync..." : "+f"(acc[0]) ...)``.
Nothing needs a helper in the preamble, and the printed operands are ordinary names.

Register operands are given as a rank-1 register tensor (its elements 0..n-1), a
slice with one free dimension (``acc[i, j, :]``), or a list of tensor elements.
Fragment registers of half/bfloat16 pairs are ``u32`` tensors (what ldmatrix writes).
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Address, Call, Cast, Expr, TensorElement, TensorSlice, const, convert
from hidet_framework.ir.math_functions import (  # noqa: F401  (re-exported for kernels)
    abs_, ceil, cos, erf, exp, floor, fma, fmax, fmin, log, math_primitive, pow_, rsqrt, sin, sqrt, tanh,
)
from hidet_framework.ir.primitives import lookup_primitive
from hidet_framework.ir.stmt import AsmStmt
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import PointerType, Scope, TensorType

from . import primitives as _primitives  # noqa: F401  (registers the cuda spellings)
from .primitives import ATOMIC_ADD_TYPES, SHUFFLE_TYPES, STREAMING_TYPES

__all__ = [
    "threadIdx", "blockIdx", "blockDim", "gridDim", "syncthreads", "syncwarp", "shfl_down_sync",
    "shfl_up_sync", "shfl_xor_sync", "shfl_sync", "atomic_add", "load_streaming", "store_streaming",
    "cvta_to_shared", "dynamic_shared_tensor",
    "cp_async", "cp_async_commit_group", "cp_async_wait_group", "cp_async_wait_all", "ldmatrix",
    "ldmatrix_x1", "ldmatrix_x2", "ldmatrix_x4", "mma_sync_m16n8k16_f16_f32", "mma_sync_m16n8k16_bf16_f32",
    "mma_sync_m16n8k8_tf32", "math_primitive", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "abs_",
    "floor", "ceil", "sin", "cos", "pow_", "fmin", "fmax", "fma", "FULL_MASK",
]

FULL_MASK = 0xFFFFFFFF


class _Dim3:
    """``threadIdx.x`` etc.: each attribute is the IR call of that primitive (int32)."""

    __slots__ = ("_base",)

    def __init__(self, base: str) -> None:
        self._base = base

    def _axis(self, axis: str) -> Call:
        return lookup_primitive(f"{self._base}_{axis}")()

    x = property(lambda self: self._axis("x"))
    y = property(lambda self: self._axis("y"))
    z = property(lambda self: self._axis("z"))

    def __repr__(self) -> str:
        return self._base


threadIdx, blockIdx, blockDim, gridDim = (_Dim3(n) for n in ("threadIdx", "blockIdx", "blockDim", "gridDim"))


def _u32(value: Any) -> Expr:
    return const(int(value), dtypes.uint32) if isinstance(value, int) else convert(value)


def syncthreads() -> Call:
    return lookup_primitive("syncthreads")()


def syncwarp(mask: Any = FULL_MASK) -> Call:
    return lookup_primitive("syncwarp")(_u32(mask))


def _short(t: Any, table: dict, what: str) -> str:
    for short, dt in table.items():
        if dt is t:
            return short
    raise TypeError(f"{what} supports {', '.join(str(d) for d in table.values())}, not {t}")


def _shuffle(kind: str, mask: Any, value: Any, lane_or_delta: Any, width: int) -> Call:
    value = convert(value)
    short = _short(infer_type(value), SHUFFLE_TYPES, "warp shuffle")
    name = f"shfl_sync_{short}" if kind == "" else f"shfl_{kind}_sync_{short}"
    return lookup_primitive(name)(_u32(mask), value, lane_or_delta, width)


def shfl_down_sync(mask: Any, value: Any, delta: Any, width: int = 32) -> Call:
    return _shuffle("down", mask, value, delta, width)


def shfl_up_sync(mask: Any, value: Any, delta: Any, width: int = 32) -> Call:
    return _shuffle("up", mask, value, delta, width)


def shfl_xor_sync(mask: Any, value: Any, lane_mask: Any, width: int = 32) -> Call:
    return _shuffle("xor", mask, value, lane_mask, width)


def shfl_sync(mask: Any, value: Any, src_lane: Any, width: int = 32) -> Call:
    return _shuffle("", mask, value, src_lane, width)


def _pointer(x: Any, what: str) -> Expr:
    """A pointer expression from a pointer, a tensor (its first element) or an element."""
    x = convert(x)
    if isinstance(x, TensorElement):
        return Address(x)
    t = infer_type(x)
    if isinstance(t, PointerType):
        return x
    if isinstance(t, TensorType):
        return Address(TensorElement(x, (const(0),) * t.rank))
    raise TypeError(f"{what}: expected a pointer, tensor or tensor element, got {x} of type {t}")


def atomic_add(address: Any, value: Any) -> Call:
    """``atomicAdd(address, value)``; `address` a pointer or a tensor element."""
    ptr = _pointer(address, "atomic_add")
    elem = infer_type(ptr).base
    short = _short(elem, ATOMIC_ADD_TYPES, "atomic_add")
    value = convert(value)
    return lookup_primitive(f"atomic_add_{short}")(ptr, value if infer_type(value) is elem else Cast(value, elem))


def load_streaming(address: Any) -> Call:
    """``__ldcs(address)`` (PTX ``ld.global.cs``): a global load marked cache-streaming,
    evict-first, for data read once. `address`: a pointer (or tensor element) to f32,
    float32x2 or float32x4 in global memory, aligned to its size."""
    ptr = _pointer(address, "load_streaming")
    short = _short(infer_type(ptr).base, STREAMING_TYPES, "load_streaming")
    return lookup_primitive(f"ldcs_{short}")(ptr)


def store_streaming(address: Any, value: Any) -> Call:
    """``__stcs(address, value)`` (PTX ``st.global.cs``): a global store marked
    cache-streaming, for data not read again soon; types as `load_streaming`."""
    ptr = _pointer(address, "store_streaming")
    elem = infer_type(ptr).base
    short = _short(elem, STREAMING_TYPES, "store_streaming")
    value = convert(value)
    return lookup_primitive(f"stcs_{short}")(ptr, value if infer_type(value) is elem else Cast(value, elem))


def cvta_to_shared(pointer: Any) -> Call:
    """The 32-bit shared-state-space address of a generic pointer into shared memory."""
    return lookup_primitive("cvta_to_shared")(_pointer(pointer, "cvta_to_shared"))


def dynamic_shared_tensor(dtype: Any, shape: Any, byte_offset: int = 0, layout: Any = None):
    """``buf = dynamic_shared_tensor(f32, [2, 64, 8], byte_offset=0)``: a tensor view over
    the kernel's dynamic shared memory (size set by ``attrs.cuda.dynamic_smem_bytes``);
    the base is 1024-byte aligned, so keep `byte_offset` a multiple of the access width."""
    from hidet_framework.lang.constructs import TensorDecl, _tensor_type

    ttype = _tensor_type(dtype, shape, layout)
    base = Call("dynamic_smem", (), PointerType(dtypes.uint8))
    ptr = base + int(byte_offset) if byte_offset else base
    return TensorDecl(ttype, Scope.LOCAL, Cast(ptr, PointerType(ttype.dtype)))


# ------------------------------------------------------------------ async copies
def cp_async(dst: Any, src: Any, cp_size: int = 16, src_size: Any = None, cache: str = "ca") -> AsmStmt:
    """``cp.async.{ca|cg}.shared.global [dst], [src], cp_size[, src_size]``: copy
    `cp_size` bytes (4, 8 or 16; ``cg`` only 16) from global to shared memory without
    passing through registers. With `src_size` (bytes, 0..cp_size) only that many are
    read and the rest zero-filled: a predicated load at a tile edge (0 reads nothing).
    `dst`/`src`: pointers or tensor elements, aligned to `cp_size`."""
    if cp_size not in (4, 8, 16):
        raise ValueError(f"cp_async: cp_size must be 4, 8 or 16 bytes, got {cp_size}")
    if cache not in ("ca", "cg"):
        raise ValueError(f"cp_async: cache must be 'ca' (L1+L2) or 'cg' (L2 only), got {cache!r}")
    if cache == "cg" and cp_size != 16:
        raise ValueError("cp_async: the .cg variant copies exactly 16 bytes")
    inputs = [("r", cvta_to_shared(dst)), ("l", _pointer(src, "cp_async source"))]
    template = f"cp.async.{cache}.shared.global [%0], [%1], {cp_size}"
    if src_size is not None:
        src_size = convert(src_size)
        inputs.append(("r", src_size if infer_type(src_size) in (dtypes.int32, dtypes.uint32)
                       else Cast(src_size, dtypes.int32)))
        template += ", %2"
    return AsmStmt(template + ";", (), tuple(inputs), True, ("memory",))


def cp_async_commit_group() -> AsmStmt:
    return AsmStmt("cp.async.commit_group;", (), (), True, ("memory",))


def cp_async_wait_group(n: int) -> AsmStmt:
    """Wait until at most `n` (a host int) committed groups are still in flight."""
    if not isinstance(n, int) or n < 0:
        raise TypeError(f"cp_async_wait_group needs a non-negative host int, got {n!r}")
    return AsmStmt(f"cp.async.wait_group {n};", (), (), True, ("memory",))


def cp_async_wait_all() -> AsmStmt:
    return AsmStmt("cp.async.wait_all;", (), (), True, ("memory",))


# ------------------------------------------------------------- register operands
def _regs(x: Any, n: int, what: str) -> list[Expr]:
    if isinstance(x, (list, tuple)):
        regs = [convert(r) for r in x]
    elif isinstance(x, TensorSlice):
        free = [d for d, i in enumerate(x.indices) if i is None]
        if len(free) != 1:
            raise TypeError(f"{what}: a register slice needs exactly one free dimension, got {len(free)}")
        d = free[0]
        start = x.starts[d] if x.starts[d] is not None else 0
        regs = [TensorElement(x.base, tuple(start + k if j == d else i for j, i in enumerate(x.indices)))
                for k in range(n)]
    else:
        x = convert(x)
        t = infer_type(x)
        if not isinstance(t, TensorType) or t.rank != 1:
            raise TypeError(f"{what}: expected a rank-1 register tensor, a slice or a list of elements, got {x}")
        regs = [TensorElement(x, (const(k),)) for k in range(n)]
    if len(regs) != n:
        raise ValueError(f"{what}: needs {n} registers, got {len(regs)}")
    return regs


def _constraint(r: Expr, what: str) -> str:
    t = infer_type(r)
    if t is dtypes.float32:
        return "f"
    if isinstance(t, DataType) and t.is_integer() and t.bits == 32:
        return "r"
    raise TypeError(f"{what}: registers must be 32-bit (u32/i32 fragments or f32 accumulators), got {t}")


def _as_b32(r: Expr, what: str) -> tuple[str, Expr]:
    """An input register of a b32 fragment: float values travel as their bits."""
    return ("r", lookup_primitive("float_as_uint")(r)) if _constraint(r, what) == "f" else ("r", r)


def ldmatrix(regs: Any, smem_ptr: Any, num: int = 4, trans: bool = False) -> AsmStmt:
    """``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``: the warp loads `num` 8x8
    b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i (`smem_ptr`, 16
    bytes aligned); each lane receives `num` u32 registers (two b16 values each)."""
    if num not in (1, 2, 4):
        raise ValueError(f"ldmatrix loads 1, 2 or 4 matrices, got {num}")
    outs = _regs(regs, num, "ldmatrix")
    for r in outs:
        if _constraint(r, "ldmatrix") != "r":
            raise TypeError("ldmatrix writes 32-bit integer registers (u32 fragments)")
    operands = ", ".join(f"%{k}" for k in range(num))
    template = f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16 {{{operands}}}, [%{num}];"
    return AsmStmt(template, tuple(("=r", r) for r in outs), (("r", cvta_to_shared(smem_ptr)),), True, ("memory",))


def ldmatrix_x1(regs: Any, smem_ptr: Any, trans: bool = False) -> AsmStmt:
    return ldmatrix(regs, smem_ptr, 1, trans)


def ldmatrix_x2(regs: Any, smem_ptr: Any, trans: bool = False) -> AsmStmt:
    return ldmatrix(regs, smem_ptr, 2, trans)


def ldmatrix_x4(regs: Any, smem_ptr: Any, trans: bool = False) -> AsmStmt:
    return ldmatrix(regs, smem_ptr, 4, trans)


def _mma(shape: str, types: str, d: Any, a: Any, b: Any, c: Any, n_a: int, n_b: int) -> AsmStmt:
    what = f"mma.sync {shape} {types}"
    dr, ar, br = _regs(d, 4, what), _regs(a, n_a, what), _regs(b, n_b, what)
    for r in dr:
        if _constraint(r, what) != "f":
            raise TypeError(f"{what}: accumulators are f32 registers")
    in_place = c is d or (isinstance(c, (list, tuple)) and isinstance(d, (list, tuple)) and
                          all(x is y for x, y in zip(c, d)))
    inputs = [_as_b32(r, what) for r in ar + br]
    pos = 4 + n_a + n_b
    a_ops = ", ".join(f"%{4 + k}" for k in range(n_a))
    b_ops = ", ".join(f"%{4 + n_a + k}" for k in range(n_b))
    if in_place:  # D = A*B + D: one read-write operand per accumulator
        outputs, c_ops = tuple(("+f", r) for r in dr), "%0, %1, %2, %3"
    else:
        outputs = tuple(("=f", r) for r in dr)
        cr = _regs(c, 4, what)
        inputs += [("f", r) for r in cr]
        c_ops = ", ".join(f"%{pos + k}" for k in range(4))
    template = (f"mma.sync.aligned.{shape}.row.col.{types} {{%0, %1, %2, %3}}, {{{a_ops}}}, {{{b_ops}}}, "
                f"{{{c_ops}}};")
    return AsmStmt(template, outputs, tuple(inputs), True, ())


def mma_sync_m16n8k16_f16_f32(d: Any, a: Any, b: Any, c: Any) -> AsmStmt:
    """D[16x8] f32 = A[16x16] f16 (row) @ B[16x8] f16 (col) + C, one warp: a 4 u32, b 2
    u32, c/d 4 f32 per lane (PTX fragment layouts). Pass the same tensor as c and d to
    accumulate in place."""
    return _mma("m16n8k16", "f32.f16.f16.f32", d, a, b, c, 4, 2)


def mma_sync_m16n8k16_bf16_f32(d: Any, a: Any, b: Any, c: Any) -> AsmStmt:
    return _mma("m16n8k16", "f32.bf16.bf16.f32", d, a, b, c, 4, 2)


def mma_sync_m16n8k8_tf32(d: Any, a: Any, b: Any, c: Any) -> AsmStmt:
    """D[16x8] f32 = A[16x8] tf32 @ B[8x8] tf32 + C: a 4 regs, b 2 regs (f32 or their bits)."""
    return _mma("m16n8k8", "f32.tf32.tf32.f32", d, a, b, c, 4, 2)


# math: the core's generic builders (hidet_framework.ir.math_functions), re-exported

