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
``bpack="full"`` variant of cpu_template.py: A and B are read only by the packing loops,
C written only by the final predicated element store, which rounds to bfloat16.

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
from hidet_framework.ir.mapping import spatial
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, bf16, cast, deref, f32, i32, local_tensor, parallel, register_tensor, script, static_range,
    unroll,
)
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec

__all__ = ["pairs_apply", "build_bf16_pairs", "dpbf16_spelling", "DPBF16_BUILTIN", "DPBF16_ASM", "PAIR_BROADCAST"]

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
    cpu_microkernel.make_micro_kernel, with one vdpbf16ps per two k steps."""
    nv = nr // LANES
    f32_ptr, pairs_ptr = PointerType(F32X16), PointerType(PAIRS_X16)

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
        if kb == k_blocks - 1:
            for i in static_range(mr):
                for v in static_range(nv):
                    tp = cast(address_of(tile[i * nr + v * LANES]), f32_ptr)
                    tp[0] = acc[i, v]
        else:
            for i in static_range(mr):
                for v in static_range(nv):
                    pp = cast(address_of(cpart[part + i * nr + v * LANES]), f32_ptr)
                    pp[0] = acc[i, v]

    return micro_kernel


def build_bf16_pairs(p: dict, ops: Any, params: Mapping[str, Any], name: str, tc: Any, part_of: Any) -> ScheduledTask:
    """The kernel for the block plan `p` (cpu_template._shape_plan, kc made even), the
    operands `ops` (MatmulOperands), C's annotation `tc` and the partial sums' slots."""
    m, n, k, mr, nr, kc = (p[x] for x in ("m", "n", "k", "mr", "nr", "kc"))
    batch, b_batched = ops.batch, ops.b_batched
    a_index, b_index, c_index = ops.a_index, ops.b_index, ops.c_index
    workers, m_tiles, sub_panels = p["workers"], p["m_tiles"], p["sub_panels"]
    k_blocks, panels_total, rows_per_part = p["k_blocks"], p["panels_total"], p["rows_per_part"]
    k2 = k + k % 2                                # K padded to whole pairs
    work, per_worker = spatial(p["wn"], p["wm"]), p["per_worker"]
    a_in_l1 = params.get("order", "a_in_l1") == "a_in_l1"
    ku = int(params.get("ku", 4))
    bpack_size = sub_panels * k2 * nr             # per worker: its B sub-block, all of K, bfloat16
    apack_size = m_tiles * kc * mr                # per worker: mc x kc of A, bfloat16
    cpart_size = m_tiles * sub_panels * mr * nr if k_blocks > 1 else 1
    micro_kernel = _micro_kernel(name, mr, nr, ku, k_blocks, workers * apack_size, workers * bpack_size,
                                 workers * cpart_size, dpbf16_spelling())

    @script
    def matmul_cpu_bf16_pairs(a: bf16[ops.a_shape], b: bf16[ops.b_shape], c: tc[ops.c_shape],
                              bpack: bf16[workers * bpack_size], apack: bf16[workers * apack_size],
                              cpart: f32[workers * cpart_size]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(workers):
            tile = local_tensor(f32, [mr * nr])
            for jw, iw in work.on(w):
              for q in range(per_worker):
                sb = jw * per_worker + q
                panel0 = sb * sub_panels
                n_panels = min(sub_panels, panels_total - panel0)
                row_lo = iw * rows_per_part
                row_hi = min(m, row_lo + rows_per_part)
                if n_panels > 0 and row_lo < row_hi:
                    for bi in range(batch):
                        if b_batched or bi == 0:
                            # ---- pack B[:, sub-block] as pairs [panel][k2 / 2][nr][2], zero past K and N
                            for pp in range(n_panels):
                                col0 = (panel0 + pp) * nr
                                dst = (w * sub_panels + pp) * k2 * nr
                                if col0 + nr <= n:     # two rows of B interleaved (vectorizes)
                                    for kp in range(k // 2):
                                        for j in range(nr):
                                            bpack[dst + (kp * nr + j) * 2] = b[b_index(bi, 2 * kp, col0 + j)]
                                            bpack[dst + (kp * nr + j) * 2 + 1] = b[b_index(bi, 2 * kp + 1, col0 + j)]
                                    for kk in range(k - k % 2, k):    # K odd: its last row, paired with 0
                                        for j in range(nr):
                                            bpack[dst + ((kk / 2) * nr + j) * 2] = b[b_index(bi, kk, col0 + j)]
                                            bpack[dst + ((kk / 2) * nr + j) * 2 + 1] = 0.0
                                else:
                                    for kk in range(k2):
                                        for j in range(nr):
                                            bpack[dst + ((kk / 2) * nr + j) * 2 + kk % 2] = \
                                                b[b_index(bi, kk, col0 + j)] if kk < k and col0 + j < n else 0.0
                        for mb in range((row_hi - row_lo + p["mc"] - 1) // p["mc"]):
                            row_base = row_lo + mb * p["mc"]
                            n_tiles = min(m_tiles, (row_hi - row_base + mr - 1) // mr)
                            for kb in range(k_blocks):
                                pc = kb * kc
                                kcur = min(kc, k2 - pc)     # even: kc and k2 are
                                kreal = min(kc, k - pc)     # odd only in the last block of an odd K
                                # ---- pack A[rows, pc:pc+kcur] as pairs [tile][kc / 2][mr][2], zero past M and K
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
                                for outer in range(n_tiles if a_in_l1 else n_panels):
                                    for inner in range(n_panels if a_in_l1 else n_tiles):
                                        ti = outer if a_in_l1 else inner
                                        jp = inner if a_in_l1 else outer
                                        a_base = (w * m_tiles + ti) * kc * mr
                                        b_base = ((w * sub_panels + jp) * k2 + pc) * nr
                                        micro_kernel(apack, bpack, cpart, tile, a_base, b_base, part_of(w, ti, jp),
                                                     kb, kcur / 2)
                                        if kb == k_blocks - 1:
                                            # ---- final store: C only through element stores
                                            row0 = row_base + ti * mr
                                            col0 = (panel0 + jp) * nr
                                            if row0 + mr <= row_hi and col0 + nr <= n:
                                                for i in range(mr):
                                                    for j in range(nr):
                                                        c[c_index(bi, row0 + i, col0 + j)] = tile[i * nr + j]
                                            else:
                                                for i in range(mr):
                                                    for j in range(nr):
                                                        if row0 + i < row_hi and col0 + j < n:
                                                            c[c_index(bi, row0 + i, col0 + j)] = tile[i * nr + j]

    from hidet_framework.lang import script_module

    workspace = (WorkspaceSpec("bpack", "bfloat16", (workers * bpack_size,)),
                 WorkspaceSpec("apack", "bfloat16", (workers * apack_size,)),
                 WorkspaceSpec("cpart", "float32", (workers * cpart_size,)))
    launch = Launch(name, (BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0),
                           BufferRef("workspace", 0), BufferRef("workspace", 1), BufferRef("workspace", 2)))
    return ScheduledTask(script_module(matmul_cpu_bf16_pairs, name=name), (launch,), workspace,
                         source="matmul.cpu_packed", params=dict(params))
