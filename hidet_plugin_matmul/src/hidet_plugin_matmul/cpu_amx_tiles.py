"""bfloat16 x bfloat16 matmul with AMX tiles (``tdpbf16ps``, issue 15).

Where the target's flags include ``amx_tile`` and ``amx_bf16`` (the CPU plugin's target
detection reports them only once Linux has granted this process the tile data
permission, see hidet_plugin_cpu.target.amx_permission) and A and B are bfloat16, the
packed template (full-K B packing order) builds this variant ahead of the vdpbf16ps
pair kernel of cpu_bf16_pairs.py. Same loop order, worker grid, partial sums (float32)
and fusion contract (the loops of cpu_full_k_skeleton.py): A and B read only by the
packing loops, C written only by the final predicated element store, which rounds to
bfloat16.

One micro-kernel call computes a 32 x 32 float32 block of C in four tiles:

    tmm0 = C[0:16, 0:16]   tmm1 = C[0:16, 16:32]   tmm4 = A[0:16, k:k+32]   tmm6 = B pairs, cols 0:16
    tmm2 = C[16:32, 0:16]  tmm3 = C[16:32, 16:32]  tmm5 = A[16:32, k:k+32]  tmm7 = B pairs, cols 16:32

and per K step of 32: four ``tileloadd`` then four ``tdpbf16ps`` (C[m][n] += the sum
over the 16 pairs p of A[m][2p] B[2p][n] + A[m][2p+1] B[2p+1][n]). Every tile is 16
rows of 64 bytes (palette 1), so one tile configuration serves all eight.

Panels (bfloat16, copied without conversion, zero past M, N and K):

    A panel [tile][mr = 32][kc]          row-major: a tile row is 32 consecutive K values
    B panel [k32 / 2][nr = 32][2]        the pair kernel's layout: a tile row is 16 pairs

K is padded to a multiple of 32 (kc too), so a padded pair adds 0 * 0. The tile
configuration is per thread: each worker loads it (``ldtilecfg``) at the start of its
share and releases the tiles (``tilerelease``) at the end.

Numerics (Intel SDM, TDPBF16PS): as VDPBF16PS, each product of two bfloat16 values is
exact in float32, accumulated in float32 rounding to nearest even whatever MXCSR says,
denormal inputs and outputs flushed to zero. The order of the additions inside one
instruction is not the pair kernel's, so results may differ from it in the last bits
of the float32 partial sums, within the same bound (K * 2^-24 * sum |a b|).

The instructions are primitives spelled as inline assembly (the generated C does not
include immintrin.h, and tile registers are named by immediates): gas assembles them
whatever -march says, so the kernel builds on any x86-64 with binutils >= 2.34; it
runs only on a CPU with AMX.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive
from hidet_framework.lang import address_of, attrs, bf16, f32, i32, local_tensor, script, u8
from hidet_framework.lang.inline_fragment import InlineFragment, inline_fragment
from hidet_framework.schedule.scheduled_task import ScheduledTask

from hidet_plugin_matmul.cpu_bf16_pairs import make_pack_b_pairs
from hidet_plugin_matmul.cpu_full_k_skeleton import FullKPieces, build_full_k_kernel, partial_sums_size

__all__ = ["amx_apply", "build_amx_tiles", "amx_plan_params", "MR", "NR", "KSTEP"]

MR = NR = 32          # a micro-kernel's block of C: 2 x 2 tiles of 16 x 16 float32
KSTEP = 32            # bfloat16 values of K per tdpbf16ps (16 pairs)
TILE_ROWS, TILE_BYTES = 16, 64


def _void(name: str, asm: str) -> Any:
    return register_primitive(PrimitiveFunction(name, None, {"cpu": asm}, evaluate=lambda *args: None))


# ldtilecfg reads the 64-byte configuration at {0}; tilerelease returns the tiles to init.
AMX_LDTILECFG = _void("amx_ldtilecfg", '__asm__ volatile("ldtilecfg (%0)" : : "r"({0}) : "memory")')
AMX_RELEASE = _void("amx_tilerelease", '__asm__ volatile("tilerelease" : : : "memory")')
# tmm{t} <- 16 rows of 64 bytes at {0}, {1} bytes apart / stored there / zeroed
AMX_LOAD = [_void(f"amx_tileloadd_{t}", '__asm__ volatile("tileloadd (%0,%1,1), %%tmm' + str(t)
                  + '" : : "r"({0}), "r"((long){1}) : "memory")') for t in range(8)]
AMX_STORE = [_void(f"amx_tilestored_{t}", '__asm__ volatile("tilestored %%tmm' + str(t)
                   + ', (%0,%1,1)" : : "r"({0}), "r"((long){1}) : "memory")') for t in range(8)]
AMX_ZERO = [_void(f"amx_tilezero_{t}", '__asm__ volatile("tilezero %%tmm' + str(t) + '" : : : "memory")')
            for t in range(8)]


def _dp(c: int, a: int, b: int) -> Any:
    """tmm{c} += tmm{a} (A, 16 x 32 bfloat16) x tmm{b} (B, 16 pairs x 16): Intel's operand
    order is ``tdpbf16ps dst, a, b``; AT&T's, which gcc's asm uses, is reversed."""
    return _void(f"amx_tdpbf16ps_{c}_{a}_{b}",
                 f'__asm__ volatile("tdpbf16ps %%tmm{b}, %%tmm{a}, %%tmm{c}" : : : "memory")')


# C tile (i, j) += A tile i x B tile j
DP = {(i, j): _dp(2 * i + j, 4 + i, 6 + j) for i in range(2) for j in range(2)}


def amx_apply(target: Any, operand_dtypes: tuple, params: Mapping[str, Any]) -> bool:
    """Whether the packed template builds this variant: the target's flags (so never a
    forced AVX2 target, nor one whose process was refused the tile permission) have
    amx_tile and amx_bf16, A and B are bfloat16, and the candidate is a full-K one."""
    flags = set(target.get("flags", ()) or ())
    return ({"amx_tile", "amx_bf16"} <= flags and operand_dtypes[0] == "bfloat16"
            and operand_dtypes[1] == "bfloat16" and params.get("bpack", "full") == "full")


def amx_plan_params(params: Mapping[str, Any]) -> dict:
    """The candidate with the block this kernel computes (mr = nr = 32) and kc a whole
    number of K steps; the other keys (mc, nsub, order, split, workers) kept."""
    kc = max(KSTEP, -(-int(params["kc"]) // KSTEP) * KSTEP)
    return dict(params, mr=MR, nr=NR, kc=kc)


def _micro_kernel(name: str, kc: int, k_blocks: int, apack_len: int, bpack_len: int, cpart_len: int):
    """The 32 x 32 block of C over one K block of `ksteps` steps of 32: from zero (first
    K block) or the partial sums, to the tile buffer (last K block) or the partial sums."""
    a_stride, b_stride, c_stride = kc * 2, NR * 4, NR * 4      # bytes between tile rows

    @script
    def micro_kernel(apack: bf16[apack_len], bpack: bf16[bpack_len], cpart: f32[cpart_len], tile: f32[MR * NR],
                     a_base: i32, b_base: i32, part: i32, kb: i32, ksteps: i32):
        attrs.func_kind = "device"
        attrs.func_name = name + "_micro_kernel"
        if k_blocks > 1 and kb > 0:
            AMX_LOAD[0](address_of(cpart[part]), c_stride)
            AMX_LOAD[1](address_of(cpart[part + 16]), c_stride)
            AMX_LOAD[2](address_of(cpart[part + 16 * NR]), c_stride)
            AMX_LOAD[3](address_of(cpart[part + 16 * NR + 16]), c_stride)
        else:
            AMX_ZERO[0]()
            AMX_ZERO[1]()
            AMX_ZERO[2]()
            AMX_ZERO[3]()
        for s in range(ksteps):
            AMX_LOAD[4](address_of(apack[a_base + s * KSTEP]), a_stride)
            AMX_LOAD[5](address_of(apack[a_base + 16 * kc + s * KSTEP]), a_stride)
            AMX_LOAD[6](address_of(bpack[b_base + s * KSTEP * NR]), b_stride)
            AMX_LOAD[7](address_of(bpack[b_base + s * KSTEP * NR + 32]), b_stride)
            DP[0, 0]()
            DP[0, 1]()
            DP[1, 0]()
            DP[1, 1]()
        if kb == k_blocks - 1:
            AMX_STORE[0](address_of(tile[0]), c_stride)
            AMX_STORE[1](address_of(tile[16]), c_stride)
            AMX_STORE[2](address_of(tile[16 * NR]), c_stride)
            AMX_STORE[3](address_of(tile[16 * NR + 16]), c_stride)
        else:
            AMX_STORE[0](address_of(cpart[part]), c_stride)
            AMX_STORE[1](address_of(cpart[part + 16]), c_stride)
            AMX_STORE[2](address_of(cpart[part + 16 * NR]), c_stride)
            AMX_STORE[3](address_of(cpart[part + 16 * NR + 16]), c_stride)

    return micro_kernel


def _make_worker_tiles() -> tuple:
    """(setup, teardown) of a worker's share: the tile configuration is per thread, so
    each worker loads it (palette 1, 8 tiles of 16 rows x 64 bytes) and releases the
    tiles at the end."""

    @inline_fragment
    @script
    def load_tile_config():
        cfg = local_tensor(u8, [64])           # palette 1, 8 tiles of 16 rows x 64 bytes
        for x in range(64):
            cfg[x] = 0
        cfg[0] = 1
        for t in range(8):
            cfg[16 + 2 * t] = TILE_BYTES       # colsb, a little-endian uint16
            cfg[48 + t] = TILE_ROWS
        AMX_LDTILECFG(address_of(cfg[0]))

    @inline_fragment
    @script
    def release_tiles():
        AMX_RELEASE()

    return load_tile_config, release_tiles


def _make_pack_a_rows(ops: Any, p: Mapping[str, Any], apack_len: int) -> InlineFragment:
    """A[rows, pc:pc+kcur] row-major into w's panels [tile][mr][kc] (a tile row is 32
    consecutive K values), zero past M and K."""
    k, mr, kc, m_tiles = (p[x] for x in ("k", "mr", "kc", "m_tiles"))
    a_index = ops.a_index

    @inline_fragment
    @script
    def pack_a_rows(a: bf16[ops.a_shape], apack: bf16[apack_len], w: i32, bi: i32, row_base: i32, row_hi: i32,
                    n_tiles: i32, pc: i32, kcur: i32):
        kreal = min(kc, k - pc)     # pc < k: K blocks start at multiples of 32 below k32
        for t in range(n_tiles):
            for i in range(mr):
                row = row_base + t * mr + i
                dst = (w * m_tiles + t) * kc * mr + i * kc
                if row < row_hi:
                    for kk in range(kreal):
                        apack[dst + kk] = a[a_index(bi, row, pc + kk)]
                    for kk in range(kreal, kcur):
                        apack[dst + kk] = 0.0
                else:
                    for kk in range(kcur):
                        apack[dst + kk] = 0.0

    return pack_a_rows


def build_amx_tiles(p: dict, ops: Any, params: Mapping[str, Any], name: str, tc: Any) -> ScheduledTask:
    """The kernel for the block plan `p` (cpu_template._shape_plan of `amx_plan_params`,
    kc a multiple of 32), the operands `ops` (MatmulOperands) and C's annotation `tc`:
    cpu_full_k_skeleton's loops with the pair kernel's B panels, row-major A panels and
    tiles."""
    k, mr, nr, kc = (p[x] for x in ("k", "mr", "nr", "kc"))
    assert mr == MR and nr == NR and kc % KSTEP == 0, (mr, nr, kc)
    workers = p["workers"]
    k32 = -(-max(k, 1) // KSTEP) * KSTEP          # K padded to whole steps
    p = dict(p, k_blocks=-(-k32 // kc))
    bpack_size = p["sub_panels"] * k32 * nr       # per worker: its B sub-block, all of K, bfloat16
    apack_size = p["m_tiles"] * kc * mr           # per worker: mc x kc of A, bfloat16
    micro_kernel = _micro_kernel(name, kc, p["k_blocks"], workers * apack_size, workers * bpack_size,
                                 workers * partial_sums_size(p))
    setup, teardown = _make_worker_tiles()
    pieces = FullKPieces("bfloat16", k32, bpack_size, apack_size, micro_kernel,
                         make_pack_b_pairs(ops, p, k32, workers * bpack_size, zero_rows_past_k=True),
                         _make_pack_a_rows(ops, p, workers * apack_size), k_step=KSTEP,
                         worker_setup=setup, worker_teardown=teardown)
    return build_full_k_kernel(p, ops, params, name, (bf16, bf16, tc, bf16), pieces)
