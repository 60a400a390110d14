"""The register-blocked SIMD micro-kernel of the CPU matmul kernels.

One call computes an mr x nr tile of C over one K block: mr x nv vector accumulators
(nv = nr / lanes) start from zero on the first K block and from the partial sums on
later ones; each of the ``kcur`` steps broadcasts mr values of A against nv vectors of
B (fused multiply-adds, every register index a constant, so the C compiler keeps the
accumulators in registers). The last K block leaves the tile in ``tile`` for the
caller's predicated store to C (which must stay in the kernel itself: fusion grafts
onto its element stores); earlier ones write the partial sums back. Called as a
``device`` function, which the C backend emits ``static inline``.

The body is shared (`make_register_tile`): by this module's micro-kernel, over the
packed panels of both loop orders of cpu_template.py, and by cpu_gemv.py's, over A
itself and B's panels packed at compile time; they differ only in where the operands
and partial sums lie. The bfloat16 pair kernel (cpu_bf16_pairs.py) shares the final
part (`make_tile_store`).
"""
from __future__ import annotations

from typing import Any, Callable

from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f32, i32, register_tensor, script, static_range, unroll,
)
from hidet_framework.lang.annotations import DTypeAnnotation
from hidet_framework.lang.inline_fragment import InlineFragment, inline_fragment

__all__ = ["make_micro_kernel", "make_register_tile", "make_tile_store", "packed_partial_at"]


def packed_partial_at(nr: int, lanes: int) -> Callable:
    """`partial_at` of the micro-kernels over packed panels, whose positions are
    (a_base, b_base, part): accumulator (i, v)'s partial sums at part + i * nr + v * lanes."""
    return lambda cpart, where, i, v: cpart[where[2] + i * nr + v * lanes]


def make_tile_store(vec: Any, lanes: int, mr: int, nr: int, k_blocks: int, partial_type: Any,
                    partial_at: Callable) -> InlineFragment:
    """(acc, tile, partial, x, y, z, kb): the accumulators to `tile` after the last K
    block, else to the partial sums, where accumulator (i, v)'s start at
    ``partial_at(partial, (x, y, z), i, v)`` (x, y, z: the kernel's position arguments)."""
    vec_ptr = PointerType(vec)
    nv = nr // lanes

    @inline_fragment
    @script
    def tile_store(acc: DTypeAnnotation(vec)[mr, nv], tile: f32[mr * nr], partial: partial_type, x: i32, y: i32,
                   z: i32, kb: i32):
        where = (x, y, z)
        if kb == k_blocks - 1:
            for i in static_range(mr):
                for v in static_range(nv):
                    tp = cast(address_of(tile[i * nr + v * lanes]), vec_ptr)
                    tp[0] = acc[i, v]
        else:
            for i in static_range(mr):
                for v in static_range(nv):
                    pp = cast(address_of(partial_at(partial, where, i, v)), vec_ptr)
                    pp[0] = acc[i, v]

    return tile_store


def make_register_tile(vec: Any, lanes: int, mr: int, nr: int, ku: int, k_blocks: int, types: tuple,
                       a_at: Callable, b_at: Callable, partial_at: Callable,
                       b_load: Callable | None = None) -> InlineFragment:
    """(a, b, partial, tile, x, y, z, kb, kcur): a float32 micro-kernel's body. `types`
    annotates a, b and partial; x, y, z are the kernel's position arguments (`where`). Where the operands lie is the kernel's: ``a_at(a, where, kk, i)`` is row i's
    A value at step kk, ``b_at(b, where, kk, v)`` the first element of B vector v there,
    ``partial_at(partial, where, i, v)`` that of accumulator (i, v)'s partial sums.
    ``b_load(b, where, kk, v)``, where given, is B vector v itself (float32 vectors from
    other element types: cpu_half_panels.py); else a vector load at `b_at`."""
    vec_ptr = PointerType(vec)
    if b_load is None:
        b_load = lambda b, where, kk, v: deref(cast(address_of(b_at(b, where, kk, v)), vec_ptr))  # noqa: E731
    nv = nr // lanes
    a_type, b_type, partial_type = types
    tile_store = make_tile_store(vec, lanes, mr, nr, k_blocks, partial_type, partial_at)

    @inline_fragment
    @script
    def register_tile(a: a_type, b: b_type, partial: partial_type, tile: f32[mr * nr], x: i32, y: i32, z: i32,
                      kb: i32, kcur: i32):
        where = (x, y, z)
        acc = register_tensor(vec, [mr, nv])
        bv = register_tensor(vec, [nv])
        if k_blocks > 1:
            if kb == 0:
                for i in static_range(mr):
                    for v in static_range(nv):
                        acc[i, v] = cast(0.0, vec)
            else:
                for i in static_range(mr):
                    for v in static_range(nv):
                        acc[i, v] = deref(cast(address_of(partial_at(partial, where, i, v)), vec_ptr))
        else:
            for i in static_range(mr):
                for v in static_range(nv):
                    acc[i, v] = cast(0.0, vec)
        for kk in unroll(kcur, ku):
            for v in static_range(nv):
                bv[v] = b_load(b, where, kk, v)
            for i in static_range(mr):
                av = a_at(a, where, kk, i)
                for v in static_range(nv):
                    acc[i, v] += cast(av, vec) * bv[v]
        tile_store(acc, tile, partial, x, y, z, kb)

    return register_tile


def make_micro_kernel(name: str, vec: Any, lanes: int, mr: int, nr: int, ku: int, k_blocks: int,
                      apack_len: int, bpack_len: int, cpart_len: int):
    """The micro-kernel device function for one candidate's constants, over packed
    panels: A [kc][mr] from a_base, B [kc][nr] from b_base, its partial sums [mr][nr]
    from part."""
    register_tile = make_register_tile(
        vec, lanes, mr, nr, ku, k_blocks, (f32[apack_len], f32[bpack_len], f32[cpart_len]),
        a_at=lambda apack, where, kk, i: apack[where[0] + kk * mr + i],
        b_at=lambda bpack, where, kk, v: bpack[where[1] + kk * nr + v * lanes],
        partial_at=packed_partial_at(nr, lanes))

    @script
    def micro_kernel(apack: f32[apack_len], bpack: f32[bpack_len], cpart: f32[cpart_len], tile: f32[mr * nr],
                     a_base: i32, b_base: i32, part: i32, kb: i32, kcur: i32):
        attrs.func_kind = "device"
        attrs.func_name = name + "_micro_kernel"
        register_tile(apack, bpack, cpart, tile, a_base, b_base, part, kb, kcur)

    return micro_kernel
