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

Below them: mbarriers and the bulk tensor copy (TMA: ``cp.async.bulk.tensor`` with a
tensor map from ``encode_tensor_map_2d``), which are plain sm_90.

Building any wgmma makes the module need sm_90a; the CUDA build picks that arch
from the source (``nvrtc_build.needs_arch_specific``).
"""
from __future__ import annotations

import math
from typing import Any

import attrs

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Call, Expr, const
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


def st_shared_pair(dst: Any, lo: Any, hi: Any, dtype: str) -> AsmStmt:
    """Two fp32 values rounded to a 16-bit `dtype` pair (``cvt.rn.{f16|bf16}x2.f32``)
    and stored as one 32-bit word at `dst` (a shared tensor element, 4-byte aligned):
    `lo` at the lower address. Half the instructions of two element stores."""
    from .lang import cvta_to_shared

    kind = {"float16": "f16x2", "bfloat16": "bf16x2"}.get(str(dtype))
    if kind is None:
        raise ValueError(f"st_shared_pair: float16 or bfloat16, got {dtype!r}")
    template = ("{\n.reg .b32 hf_pair;\n"
                f"cvt.rn.{kind}.f32 hf_pair, %2, %1;\n"
                "st.shared.b32 [%0], hf_pair;\n}")
    return AsmStmt(template, (), (("r", cvta_to_shared(dst)), ("f", lo), ("f", hi)), True, ("memory",))


# ------------------------------------------------------- mbarriers and TMA (sm_90)
# An mbarrier is a 64-bit word in shared memory (declare ``shared_tensor(u64, [n])``)
# that counts arrivals and, for the bulk tensor copies, transaction bytes; a phase
# completes when both reach zero, and waiting is by phase parity (0, 1, 0, ...).
# The tensor memory accelerator (TMA) copies a box of a tensor described by a
# 128-byte *tensor map* (made on the host, `encode_tensor_map_2d`) straight to shared
# memory and signals an mbarrier with the bytes it wrote; boxes past the tensor's
# edges are zero-filled. The tensor map is read from global memory here (a device
# buffer written before the launch), so kernels take it as an ordinary pointer.

def _shared_u32(bar: Any):
    from .lang import cvta_to_shared

    return cvta_to_shared(bar)


def _i32(value: Any) -> Expr:
    from hidet_framework.ir.expr import Cast, convert
    from hidet_framework.ir.type_infer import infer_type

    if isinstance(value, int):
        return const(value, dtypes.int32)
    value = convert(value)
    return value if infer_type(value) in (dtypes.int32, dtypes.uint32) else Cast(value, dtypes.int32)


def mbarrier_init(bar: Any, count: Any) -> AsmStmt:
    """Initialise the mbarrier at `bar` (a shared u64 element) for `count` arrivals a
    phase. One thread does it; then `fence_mbarrier_init` and a block barrier."""
    return AsmStmt("mbarrier.init.shared::cta.b64 [%0], %1;", (), (("r", _shared_u32(bar)), ("r", _i32(count))),
                   True, ("memory",))


def fence_mbarrier_init() -> AsmStmt:
    """Make initialised mbarriers visible to the async proxy (the TMA unit)."""
    return AsmStmt("fence.mbarrier_init.release.cluster;", (), (), True, ("memory",))


def mbarrier_arrive(bar: Any) -> AsmStmt:
    return AsmStmt("mbarrier.arrive.shared::cta.b64 _, [%0];", (), (("r", _shared_u32(bar)),), True, ("memory",))


def mbarrier_arrive_expect_tx(bar: Any, nbytes: Any) -> AsmStmt:
    """Arrive and announce `nbytes` of copies that will complete on this phase."""
    return AsmStmt("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;", (),
                   (("r", _shared_u32(bar)), ("r", _i32(nbytes))), True, ("memory",))


def mbarrier_wait(bar: Any, parity: Any) -> AsmStmt:
    """Spin until the phase of parity `parity` (0 or 1, IR or host) has completed."""
    template = ("{\n.reg .pred done;\nHF_MBAR_WAIT:\n"
                "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                "@!done bra HF_MBAR_WAIT;\n}")
    return AsmStmt(template, (), (("r", _shared_u32(bar)), ("r", _i32(parity))), True, ("memory",))


def tma_load_2d(dst: Any, tensor_map: Any, bar: Any, col: Any, row: Any) -> AsmStmt:
    """Copy the box at (`row`, `col`) (element coordinates of its first element, the
    column innermost) of the tensor map's tensor into shared memory at `dst`
    (aligned to 128 bytes; 1024 for a 128-byte swizzle) and complete its bytes on `bar`.
    `tensor_map`: a pointer to the 128-byte map in global memory, or a
    `tensor_map_param` (a kernel parameter)."""
    return tma_load(dst, tensor_map, bar, (col, row))


def tma_load(dst: Any, tensor_map: Any, bar: Any, coords: Any, multicast: int = 0) -> AsmStmt:
    """`tma_load_2d` for a map of any rank 1..5; `coords` innermost first. `multicast`
    (a host bit mask of CTAs of the cluster, 0: none): the box lands at the same
    shared-memory offset in each of those CTAs and completes on each one's `bar`."""
    from .lang import _pointer

    coords = tuple(coords)
    if not 1 <= len(coords) <= 5:
        raise ValueError(f"tma_load: 1..5 coordinates, got {len(coords)}")
    from hidet_framework.ir.expr import convert
    from hidet_framework.ir.type_infer import infer_type

    address = convert(tensor_map)
    if infer_type(address) != dtypes.uint64:  # a tensor_map_param (or a variable holding one) is a u64
        address = _pointer(tensor_map, "tma_load")
    n = len(coords)
    where = ", ".join(f"%{2 + i}" for i in range(n))
    if not isinstance(multicast, int) or not 0 <= multicast < 1 << 16:
        raise ValueError(f"tma_load: multicast is a 16-bit host mask, got {multicast!r}")
    suffix = f".multicast::cluster [%0], [%1, {{{where}}}], [%{2 + n}], {multicast};" if multicast else \
        f" [%0], [%1, {{{where}}}], [%{2 + n}];"
    template = f"cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes" + suffix
    if multicast:  # the mask is an immediate-free operand: a 16-bit register
        template = "{\n.reg .b16 hf_mask;\nmov.b16 hf_mask, " + str(multicast) + ";\n" + \
            template.replace(f"], {multicast};", "], hf_mask;") + "\n}"
    inputs = (("r", _shared_u32(dst)), ("l", address), *(("r", _i32(c)) for c in coords),
              ("r", _shared_u32(bar)))
    return AsmStmt(template, (), inputs, True, ("memory",))


# ------------------------------------------------------------ clusters (sm_90)
def mbarrier_arrive_cluster(bar: Any, cta_rank: Any) -> AsmStmt:
    """Arrive on the mbarrier at `bar`'s offset in CTA `cta_rank` of this cluster
    (``mapa`` then a release at cluster scope): a consumer releasing a stage that the
    peer CTA's producer multicasts into."""
    template = ("{\n.reg .b32 hf_remote;\nmapa.shared::cluster.u32 hf_remote, %0, %1;\n"
                "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [hf_remote];\n}")
    return AsmStmt(template, (), (("r", _shared_u32(bar)), ("r", _i32(cta_rank))), True, ("memory",))


def ld_shared_cluster_v4_f32(regs: Any, smem_ptr: Any, cta_rank: Any) -> AsmStmt:
    """4 f32 (16 bytes, aligned) at local `smem_ptr`'s offset in the shared memory of CTA
    `cta_rank` of this cluster (distributed shared memory: ``mapa`` then
    ``ld.shared::cluster.v4.f32``); `regs`: 4 f32 registers (a rank-1 tensor or a list)."""
    from .lang import _constraint, _regs

    outs = _regs(regs, 4, "ld_shared_cluster_v4_f32")
    if any(_constraint(r, "ld_shared_cluster_v4_f32") != "f" for r in outs):
        raise TypeError("ld_shared_cluster_v4_f32 writes f32 registers")
    template = ("{\n.reg .b32 hf_remote;\nmapa.shared::cluster.u32 hf_remote, %4, %5;\n"
                "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [hf_remote];\n}")
    return AsmStmt(template, tuple(("=f", r) for r in outs), (("r", _shared_u32(smem_ptr)), ("r", _i32(cta_rank))),
                   True, ("memory",))


def cluster_sync() -> AsmStmt:
    """Every thread of every CTA of the cluster waits for all the others (after
    mbarrier initialisation; before exit, so no peer arrives on freed shared memory)."""
    return AsmStmt("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;", (), (), True, ("memory",))


# A tensor map as a kernel parameter: `tensor_map_param(a, box)` inside a kernel is the
# generic address of a ``const __grid_constant__`` 128-byte parameter that the code
# generator appends to the kernel's signature (named TENSOR_MAP_PREFIX + a's C name)
# and that the runtime encodes from the buffer bound to `a` whenever it binds a launch
# (kernel.pack_arguments; a LaunchPlan re-encodes when the pointer changes). The
# call keeps `a` itself as an argument, so fusion sees a non-element use and never
# grafts a producer onto it (the TMA reads the buffer, not the IR's loads).
TENSOR_MAP_PRIMITIVE = "tensor_map_param"
TENSOR_MAP_PREFIX = "hf_tmap_"
TENSOR_MAP_BOX_RANK = 5  # the call's box arguments, padded with 1s in front


def tensor_map_param(param: Any, box: Any, swizzle_bytes: int = 128) -> Call:
    """The tensor map of kernel tensor parameter `param` (row-major, static shape) cut
    into boxes `box` (one side per dim, outermost first) with this swizzle."""
    from hidet_framework.ir.expr import Var
    from hidet_framework.ir.primitives import lookup_primitive
    from hidet_framework.ir.types import TensorType

    if not isinstance(param, Var) or not isinstance(param.type, TensorType) or param.type.layout is not None:
        raise TypeError(f"tensor_map_param: a row-major tensor parameter, got {param!r}")
    shape, box = param.type.shape, tuple(int(b) for b in box)
    if not all(isinstance(d, int) for d in shape) or len(box) != len(shape) or len(shape) > TENSOR_MAP_BOX_RANK:
        raise ValueError(f"tensor_map_param: a static shape of rank <= 5 and one box side a dim, got "
                         f"{shape} and box {box}")
    if param.type.dtype.name not in TMA_DTYPES or swizzle_bytes not in TMA_SWIZZLE:
        raise ValueError(f"tensor_map_param: dtype {param.type.dtype.name} / swizzle {swizzle_bytes} "
                         f"not one TMA takes")
    padded = (1,) * (TENSOR_MAP_BOX_RANK - len(box)) + box
    return lookup_primitive(TENSOR_MAP_PRIMITIVE)(param, const(swizzle_bytes, dtypes.int32),
                                                  *(const(b, dtypes.int32) for b in padded))


def tensor_maps_of(fn: Any) -> list[tuple]:
    """``(param index, swizzle bytes, box)`` of every tensor-map parameter `fn` uses,
    in parameter order (box outermost first, the param's rank long). One map per param."""
    from hidet_framework.ir.functors import collect

    found: dict = {}
    for call in collect(fn.body, Call):
        if call.func != TENSOR_MAP_PRIMITIVE:
            continue
        param, swizzle, *box = call.args
        if param not in fn.params:
            raise ValueError(f"{fn.name}: tensor_map_param of {param!r}, which is not a parameter")
        rank = len(param.type.shape)
        entry = (fn.params.index(param), int(swizzle.value), tuple(int(b.value) for b in box[TENSOR_MAP_BOX_RANK - rank:]))
        if found.setdefault(entry[0], entry) != entry:
            raise ValueError(f"{fn.name}: two different tensor maps of parameter {param.hint!r}")
    return [found[k] for k in sorted(found)]


# ------------------------------------------------------------------ host: tensor maps
TMA_DTYPES = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "uint8": "UINT8",
              "int32": "INT32", "float64": "FLOAT64"}
TMA_SWIZZLE = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}


def encode_tensor_map_2d(address: int, dtype: str, rows: int, cols: int, row_pitch_bytes: int, box_rows: int,
                         box_cols: int, swizzle_bytes: int = 0) -> bytes:
    """The 128-byte tensor map of a row-major [rows, cols] tensor at device `address`
    whose boxes are [box_rows, box_cols] (through the driver's cuTensorMapEncodeTiled).
    Limits the driver checks too, said here plainly: the address and row pitch are
    multiples of 16 bytes, a box side is at most 256 elements, and with a swizzle a box
    row is at most the swizzle span."""
    return encode_tensor_map(address, dtype, (rows, cols), (box_rows, box_cols), swizzle_bytes, (row_pitch_bytes,))


def encode_tensor_map(address: int, dtype: str, dims: tuple, box: tuple, swizzle_bytes: int = 0,
                      pitches: tuple | None = None) -> bytes:
    """The tensor map of a rank 1..5 tensor at `address`: `dims` and `box` outermost
    first, `pitches` the byte strides of the outer dims (row-major when None)."""
    from .driver import check, cuda_driver, ensure_initialized

    if dtype not in TMA_DTYPES:
        raise ValueError(f"tensor maps here take {sorted(TMA_DTYPES)}, got {dtype!r}")
    if swizzle_bytes not in TMA_SWIZZLE:
        raise ValueError(f"swizzle must be one of {sorted(TMA_SWIZZLE)} bytes, got {swizzle_bytes}")
    rank, elem = len(dims), dtypes.data_type(dtype).nbytes
    if not 1 <= rank <= 5 or len(box) != rank:
        raise ValueError(f"a tensor map has 1..5 dims and one box side each, got dims {dims}, box {box}")
    if pitches is None:
        pitches = tuple(elem * math.prod(dims[d + 1:]) for d in range(rank - 1))
    cols = dims[-1]
    if address % 16 or any(p % 16 for p in pitches) or (rank > 1 and pitches[-1] < cols * elem):
        raise ValueError(f"TMA needs a 16-byte aligned address and row pitch >= a row; got address "
                         f"{address:#x}, pitch {pitches[-1] if pitches else None} for {cols} x {elem} bytes")
    if not all(0 < b <= 256 for b in box) or (box[-1] * elem) % 16:
        raise ValueError(f"box sides must be 1..256 elements and a box row a multiple of 16 bytes, got "
                         f"{list(box)} of {elem}-byte elements")
    if swizzle_bytes and box[-1] * elem > swizzle_bytes:
        raise ValueError(f"a box row of {box[-1] * elem} bytes exceeds the {swizzle_bytes}-byte swizzle")
    ensure_initialized()
    drv = cuda_driver()
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    tmap = check(drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{TMA_DTYPES[dtype]}"), rank, address,
        [u64(d) for d in reversed(dims)], [u64(p) for p in reversed(pitches)],
        [u32(b) for b in reversed(box)], [u32(1)] * rank,
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{TMA_SWIZZLE[swizzle_bytes]}"),
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    words = list(tmap.opaque)
    return b"".join(int(w).to_bytes(8, "little") for w in words)


# ------------------------------------------------------- warp specialisation (sm_90a)
def named_barrier_sync(barrier: Any, threads: int) -> AsmStmt:
    """``bar.sync id, threads``: wait until `threads` threads (a multiple of 32) of the
    block reach barrier `barrier` (1..15; 0 is __syncthreads'). Lets the consumer
    warpgroups of a warp-specialised kernel synchronise without the producer warp."""
    if not isinstance(threads, int) or threads <= 0 or threads % 32:
        raise ValueError(f"named_barrier_sync: threads must be a positive multiple of 32, got {threads!r}")
    if isinstance(barrier, int) and not 1 <= barrier <= 15:
        raise ValueError(f"named_barrier_sync: barrier ids 1..15 (0 is the block's), got {barrier}")
    return AsmStmt("bar.sync %0, %1;", (), (("r", _i32(barrier)), ("r", _i32(threads))), True, ("memory",))


def setmaxnreg(registers: int, increase: bool) -> AsmStmt:
    """``setmaxnreg.{inc|dec}.sync.aligned.u32``: move this warpgroup's register budget
    (a multiple of 8 in 24..256) up (consumers) or down (the producer). Takes effect only
    with a register cap at entry (``__launch_bounds__(threads, 1)``) and each role one
    branch of a single if/else (HOPPER.md); needs sm_90a."""
    if not isinstance(registers, int) or registers % 8 or not 24 <= registers <= 256:
        raise ValueError(f"setmaxnreg: a multiple of 8 in 24..256, got {registers!r}")
    return AsmStmt(f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 {registers};", (), (), True,
                   ("memory",))
