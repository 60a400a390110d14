"""bfloat16 x bfloat16 matmul with AVX512_BF16's ``vdpbf16ps`` (issue 15).

Where the target's ISA flags include ``avx512_bf16`` (and its vectors are 512 bits) and
both A and B are bfloat16, the packed template (full-K B packing order) builds this
variant instead of widening to float32: ``vdpbf16ps acc, a, b`` adds, in each of 16
float32 lanes, the products of a *pair* of bfloat16 values of ``a`` and of ``b``; one
instruction does the work of two float32 FMAs. So the panels keep bfloat16 (half the
bytes, copied without conversion) interleaved in pairs along K:

    B panel [k / 2][nr][2]: lane j of a vector holds B[k, j] (low half), B[k + 1, j]
    A panel [kc / 2][mr][2]: one 32-bit broadcast gives A[i, k], A[i, k + 1] to all lanes

K is padded to even with zeros (in both panels, so the padding adds 0 * 0). Same loop
order, blocking, worker grid, partial sums (float32) and fusion contract as the
``bpack="full"`` variant of cpu_template.py, whose loops it shares
(cpu_full_k_skeleton.py): A and B are read only by the packing loops here, C written only
by the final predicated element store, which rounds to bfloat16.

Numerics (Intel SDM, VDPBF16PS): each product of two bfloat16 values is exact in
float32; the two products of a pair are added to the accumulator one after the other,
each addition rounded to nearest even, whatever MXCSR says, with denormal inputs and
results flushed to zero. So the accumulation error is that of a float32 sum of K terms
(at most K * 2^-24 * sum |a b| to first order) plus at most 2^-126 per flushed step.

The instruction is a primitive with two spellings, not ``_mm512_dpbf16_ps`` (the
generated C does not include immintrin.h): gcc's builtin where the compiler is gcc 12 or
older (it keeps the accumulators in registers), inline assembly with ``v`` operands
elsewhere, because the builtin's operand type changed in gcc 13 (short vectors, then
__bf16 vectors) and ``asm`` builds the same on every compiler (`dpbf16_spelling`). Where the target also has AMX
(``amx_tile`` and ``amx_bf16``), cpu_amx_tiles.py's tile kernel is built instead.
"""
from __future__ import annotations

import functools
import subprocess
from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import float32, vector_type
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, bf16, cast, deref, f32, i32, register_tensor, script, static_range, unroll,
)
from hidet_framework.lang.inline_fragment import InlineFragment, inline_fragment
from hidet_framework.schedule.scheduled_task import ScheduledTask

from hidet_plugin_matmul.cpu_full_k_skeleton import FullKPieces, build_full_k_kernel, partial_sums_size
from hidet_plugin_matmul.cpu_microkernel import make_tile_store, packed_partial_at

__all__ = ["pairs_apply", "build_bf16_pairs", "make_pack_b_pairs", "dpbf16_spelling", "DPBF16_BUILTIN", "DPBF16_ASM", "PAIR_BROADCAST"]

LANES = 16                                   # float32 lanes of a 512-bit vector
F32X16 = vector_type(float32, LANES)
PAIRS_X16 = vector_type(dtypes.int16, 2 * LANES)   # 16 pairs of bfloat16, as bits
PAIR_X16 = vector_type(dtypes.int32, LANES)          # a pair of bfloat16 (as bits) per lane

# acc + the pair products, two spellings of one instruction. gcc's builtin keeps the
# accumulators in registers; it takes short vectors up to gcc 12 and __bf16 vectors from
# gcc 13 (which this machine cannot build), so other compilers get inline assembly, which
# builds everywhere but made gcc 12 keep the 28 accumulators on the stack (a load and a
# store of each per unrolled loop step).
DPBF16_BUILTIN = register_primitive(PrimitiveFunction(
    "dpbf16_f32x16_gcc12", F32X16, {"cpu": "__builtin_ia32_dpbf16ps_v16sf({0}, (int16x32){1}, {2})"}))
DPBF16_ASM = register_primitive(PrimitiveFunction(
    "dpbf16_f32x16_asm", F32X16,
    {"cpu": '({{ __typeof__({0}) hidet_dp = {0}; __asm__("vdpbf16ps %2, %1, %0" : "+v"(hidet_dp) '
            ': "v"({1}), "v"({2})); hidet_dp; }})'}))


@functools.lru_cache(maxsize=None)
def dpbf16_spelling() -> Any:
    """DPBF16_BUILTIN where the C compiler is gcc 12 or older, else DPBF16_ASM."""
    try:
        from hidet_plugin_cpu.build import compiler_identity

        version_line = compiler_identity().rsplit(" (", 1)[0]     # "gcc (Debian 12.2.0-14) 12.2.0"
        gcc = version_line.startswith(("gcc", "cc")) and "clang" not in version_line
        major = int(version_line.split()[-1].split(".")[0]) if gcc else 99
    except (OSError, ValueError, IndexError, ImportError, subprocess.SubprocessError):
        major = 99
    return DPBF16_BUILTIN if major <= 12 else DPBF16_ASM


# One pair of A (two bfloat16) in all 16 lanes. memcpy, not an int32_t load: the panel
# is bfloat16 (uint16_t) storage, which C's aliasing rules forbid reading as int32_t;
# gcc turns it into one vpbroadcastd from memory.
PAIR_BROADCAST = register_primitive(PrimitiveFunction(
    "bf16_pair_broadcast_x16", PAIR_X16,
    {"cpu": "({{ int32_t hidet_pair; memcpy(&hidet_pair, {0}, 4); (int32x16){{"
            + ", ".join(["hidet_pair"] * LANES) + "}}; }})"}))


def pairs_apply(target: Any, operand_dtypes: tuple, params: Mapping[str, Any]) -> bool:
    """Whether the packed template builds this variant: the target (its ISA flags, so a
    forced AVX2 target never does) has avx512_bf16 and 512-bit vectors, A and B are
    bfloat16, and the candidate is a full-K one of 16-lane vectors."""
    flags = set(target.get("flags", ()) or ())
    return ("avx512_bf16" in flags and int(target.get("vector_bits", 0)) >= 512
            and operand_dtypes[0] == "bfloat16" and operand_dtypes[1] == "bfloat16"
            and params.get("bpack", "full") == "full" and int(params.get("lanes", LANES)) == LANES)


def _micro_kernel(name: str, mr: int, nr: int, ku: int, k_blocks: int, apack_len: int, bpack_len: int,
                  cpart_len: int, dpbf16: Any):
    """mr x nv float32x16 accumulators over one K block of kpairs pairs; as
    cpu_microkernel.make_micro_kernel, with one vdpbf16ps per two k steps (and its
    final store, `make_tile_store`)."""
    nv = nr // LANES
    f32_ptr, pairs_ptr = PointerType(F32X16), PointerType(PAIRS_X16)
    tile_store = make_tile_store(F32X16, LANES, mr, nr, k_blocks, f32[cpart_len], packed_partial_at(nr, LANES))

    @script
    def micro_kernel(apack: bf16[apack_len], bpack: bf16[bpack_len], cpart: f32[cpart_len], tile: f32[mr * nr],
                     a_base: i32, b_base: i32, part: i32, kb: i32, kpairs: i32):
        attrs.func_kind = "device"
        attrs.func_name = name + "_micro_kernel"
        acc = register_tensor(F32X16, [mr, nv])
        bv = register_tensor(PAIRS_X16, [nv])
        if k_blocks > 1 and kb > 0:
            for i in static_range(mr):
                for v in static_range(nv):
                    acc[i, v] = deref(cast(address_of(cpart[part + i * nr + v * LANES]), f32_ptr))
        else:
            for i in static_range(mr):
                for v in static_range(nv):
                    acc[i, v] = cast(0.0, F32X16)
        for kp in unroll(kpairs, ku):
            for v in static_range(nv):
                bv[v] = deref(cast(address_of(bpack[b_base + (kp * nr + v * LANES) * 2]), pairs_ptr))
            for i in static_range(mr):
                ap = PAIR_BROADCAST(address_of(apack[a_base + (kp * mr + i) * 2]))
                for v in static_range(nv):
                    acc[i, v] = dpbf16(acc[i, v], ap, bv[v])
        tile_store(acc, tile, cpart, a_base, b_base, part, kb)

    return micro_kernel


def make_pack_b_pairs(ops: Any, p: Mapping[str, Any], k_padded: int, bpack_len: int,
                      zero_rows_past_k: bool = False) -> InlineFragment:
    """B[:, col0:col0+nr] into the panel of pairs [k_padded / 2][nr][2] at dst, zero past
    K and N: the layout vdpbf16ps reads, and the AMX kernel's B tiles (16 pairs a row).
    K padded to even (this kernel) adds at most one row, written with its pair's 0;
    `zero_rows_past_k` (the AMX kernel: K padded to 32) writes the odd last row and the
    zero rows in one loop."""
    n, k, nr = (p[x] for x in ("n", "k", "nr"))
    b_index = ops.b_index

    @inline_fragment
    @script
    def pack_b_pairs(b: bf16[ops.b_shape], bpack: bf16[bpack_len], bi: i32, col0: i32, dst: i32):
        if col0 + nr <= n:     # two rows of B interleaved (vectorizes)
            for kp in range(k // 2):
                for j in range(nr):
                    bpack[dst + (kp * nr + j) * 2] = b[b_index(bi, 2 * kp, col0 + j)]
                    bpack[dst + (kp * nr + j) * 2 + 1] = b[b_index(bi, 2 * kp + 1, col0 + j)]
            if zero_rows_past_k:
                for kk in range(k - k % 2, k_padded):  # K's odd last row, then zeros
                    for j in range(nr):
                        bpack[dst + ((kk / 2) * nr + j) * 2 + kk % 2] = \
                            b[b_index(bi, kk, col0 + j)] if kk < k else 0.0
            else:
                for kk in range(k - k % 2, k):    # K odd: its last row, paired with 0
                    for j in range(nr):
                        bpack[dst + ((kk / 2) * nr + j) * 2] = b[b_index(bi, kk, col0 + j)]
                        bpack[dst + ((kk / 2) * nr + j) * 2 + 1] = 0.0
        else:
            for kk in range(k_padded):
                for j in range(nr):
                    bpack[dst + ((kk / 2) * nr + j) * 2 + kk % 2] = \
                        b[b_index(bi, kk, col0 + j)] if kk < k and col0 + j < n else 0.0

    return pack_b_pairs


def _make_pack_a_pairs(ops: Any, p: Mapping[str, Any], apack_len: int) -> InlineFragment:
    """A[rows, pc:pc+kcur] into w's panels of pairs [tile][kc / 2][mr][2], zero past M
    and K (kcur is even: kc and K padded are)."""
    k, mr, kc, m_tiles = (p[x] for x in ("k", "mr", "kc", "m_tiles"))
    a_index = ops.a_index

    @inline_fragment
    @script
    def pack_a_pairs(a: bf16[ops.a_shape], apack: bf16[apack_len], w: i32, bi: i32, row_base: i32, row_hi: i32,
                     n_tiles: i32, pc: i32, kcur: i32):
        kreal = min(kc, k - pc)     # odd only in the last block of an odd K
        for t in range(n_tiles):
            for i in range(mr):
                row = row_base + t * mr + i
                dst = (w * m_tiles + t) * kc * mr + i * 2
                if row < row_hi:
                    for kp in range(kreal / 2):
                        apack[dst + kp * mr * 2] = a[a_index(bi, row, pc + 2 * kp)]
                        apack[dst + kp * mr * 2 + 1] = a[a_index(bi, row, pc + 2 * kp + 1)]
                    for kk in range(kreal - kreal % 2, kcur):  # the odd K's last pair
                        apack[dst + (kk / 2) * mr * 2 + kk % 2] = \
                            a[a_index(bi, row, pc + kk)] if kk < kreal else 0.0
                else:
                    for kk in range(kcur):
                        apack[dst + (kk / 2) * mr * 2 + kk % 2] = 0.0

    return pack_a_pairs


def build_bf16_pairs(p: dict, ops: Any, params: Mapping[str, Any], name: str, tc: Any) -> ScheduledTask:
    """The kernel for the block plan `p` (cpu_template._shape_plan, kc made even), the
    operands `ops` (MatmulOperands) and C's annotation `tc`: cpu_full_k_skeleton's loops
    with bfloat16 pair panels and this micro-kernel."""
    k, mr, nr, kc = (p[x] for x in ("k", "mr", "nr", "kc"))
    workers = p["workers"]
    k2 = k + k % 2                                # K padded to whole pairs
    ku = int(params.get("ku", 4))
    bpack_size = p["sub_panels"] * k2 * nr        # per worker: its B sub-block, all of K, bfloat16
    apack_size = p["m_tiles"] * kc * mr           # per worker: mc x kc of A, bfloat16
    micro_kernel = _micro_kernel(name, mr, nr, ku, p["k_blocks"], workers * apack_size, workers * bpack_size,
                                 workers * partial_sums_size(p), dpbf16_spelling())
    pieces = FullKPieces("bfloat16", k2, bpack_size, apack_size, micro_kernel,
                         make_pack_b_pairs(ops, p, k2, workers * bpack_size),
                         _make_pack_a_pairs(ops, p, workers * apack_size), k_step=2)
    return build_full_k_kernel(p, ops, params, name, (bf16, bf16, tc, bf16), pieces)
