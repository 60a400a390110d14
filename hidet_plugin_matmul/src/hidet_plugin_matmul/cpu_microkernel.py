"""The register-blocked SIMD micro-kernel both CPU matmul loop orders share.

One call computes an mr x nr tile of C over one K block: mr x nv vector accumulators
(nv = nr / lanes) start from zero on the first K block and from the partial sums in
``cpart`` on later ones; each of the ``kcur`` steps broadcasts mr values of the packed
A panel against nv vectors of the packed B panel (fused multiply-adds, every register
index a constant, so the C compiler keeps the accumulators in registers). The last K
block leaves the tile in ``tile`` for the caller's predicated store to C (which must
stay in the kernel itself: fusion grafts onto its element stores); earlier ones write
the partial sums back to ``cpart``. Called as a ``device`` function, which the C
backend emits ``static inline``.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f32, i32, register_tensor, script, static_range, unroll,
)


def make_micro_kernel(name: str, vec: Any, lanes: int, mr: int, nr: int, ku: int, k_blocks: int,
                      apack_len: int, bpack_len: int, cpart_len: int):
    """The micro-kernel device function for one candidate's constants."""
    vec_ptr = PointerType(vec)
    nv = nr // lanes

    @script
    def micro_kernel(apack: f32[apack_len], bpack: f32[bpack_len], cpart: f32[cpart_len], tile: f32[mr * nr],
                     a_base: i32, b_base: i32, part: i32, kb: i32, kcur: i32):
        attrs.func_kind = "device"
        attrs.func_name = name + "_micro_kernel"
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
                        acc[i, v] = deref(cast(address_of(cpart[part + i * nr + v * lanes]), vec_ptr))
        else:
            for i in static_range(mr):
                for v in static_range(nv):
                    acc[i, v] = cast(0.0, vec)
        for kk in unroll(kcur, ku):
            for v in static_range(nv):
                bv[v] = deref(cast(address_of(bpack[b_base + kk * nr + v * lanes]), vec_ptr))
            for i in static_range(mr):
                av = apack[a_base + kk * mr + i]
                for v in static_range(nv):
                    acc[i, v] += cast(av, vec) * bv[v]
        if kb == k_blocks - 1:
            for i in static_range(mr):
                for v in static_range(nv):
                    tp = cast(address_of(tile[i * nr + v * lanes]), vec_ptr)
                    tp[0] = acc[i, v]
        else:
            for i in static_range(mr):
                for v in static_range(nv):
                    pp = cast(address_of(cpart[part + i * nr + v * lanes]), vec_ptr)
                    pp[0] = acc[i, v]

    return micro_kernel
