"""Half-precision weight panels for the prepacked GEMV (`cpu_gemv.py`), widened to
float32 in registers as they are loaded.

The GEMV / short-M kernel streams every weight once per call: it is memory bound, so
panels of bfloat16 or float16 weights that stay 2-byte halve the bytes it reads
(float32 panels, what `pack_b` made of half weights before, double them).

bfloat16 is the upper half of a float's bits, so widening is a shift. The panel's
columns are stored so that one 32-bit lane holds two of them: within each group of
``2 * lanes`` columns, lane l holds column l in its low half and column l + lanes in its
high half::

    panel row k, group g:  [c0 | c16] [c1 | c17] ... [c15 | c31]    (lanes 16)
    vector 2g     = bits << 16           columns g*32 + 0..15
    vector 2g + 1 = bits & 0xffff0000    columns g*32 + 16..31

one full-width load and one integer operation per float32 vector, no shuffle, with
AVX2 as with AVX-512 (no avx512_bf16 needed; the vdpbf16ps pair kernel would need A in
bfloat16 and pairs along K, and the kernel is bound by memory, not by its FMAs).

float16 keeps the plain column order: ``vcvtph2ps`` converts ``lanes`` consecutive
halves from memory (F16C's ymm form on 8 lanes, AVX-512F's zmm form on 16), spelled as
one-instruction inline assembly (gcc 12 scalarizes ``__builtin_convertvector`` from a
``_Float16`` vector without AVX512-FP16). Where the target lacks the flag, float16
weights are widened to float32 panels at compile time, as before.
"""
from __future__ import annotations

from typing import Any, Callable

from hidet_framework.ir.dtypes import float32, vector_type
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive
from hidet_framework.lang import address_of

__all__ = ["half_panels_apply", "panel_position", "half_panel_load"]


def half_panels_apply(dtype: str, target: Any, nr: int, lanes: int) -> bool:
    """Whether `pack_b` keeps weights of `dtype` 2-byte for a target with `lanes`-wide
    float32 vectors and panels `nr` wide."""
    flags = set(target.get("flags", ()) or ())
    if lanes not in (8, 16):
        return False
    if dtype == "bfloat16":
        return nr % (2 * lanes) == 0
    if dtype == "float16":
        return nr % lanes == 0 and ((lanes == 8 and "f16c" in flags) or (lanes == 16 and "avx512f" in flags))
    return False


def panel_position(dtype: str, col: Any, lanes: int) -> Any:
    """Where column `col` (0 <= col < nr) of a panel row lies in the row's storage."""
    if dtype != "bfloat16":
        return col
    group = 2 * lanes
    return col // group * group + col % lanes * 2 + col // lanes % 2


def _bf16_primitive(lanes: int, high: bool) -> PrimitiveFunction:
    """float32 vector from `lanes` 32-bit lanes of bfloat16 pairs: the high halves
    (masked) or the low ones (shifted up)."""
    widen = "& 0xffff0000u" if high else "<< 16"
    return register_primitive(PrimitiveFunction(
        f"bf16_pairs_{'high' if high else 'low'}_f32x{lanes}", vector_type(float32, lanes),
        {"cpu": f"({{{{ typedef uint32_t hidet_w __attribute__((vector_size({4 * lanes}), aligned(2), may_alias)); "
                f"(float32x{lanes})(*(const hidet_w *)({{0}}) {widen}); }}}})"}))


def _f16_primitive(lanes: int) -> PrimitiveFunction:
    """float32 vector from `lanes` consecutive float16 (vcvtph2ps from memory)."""
    return register_primitive(PrimitiveFunction(
        f"f16_load_f32x{lanes}", vector_type(float32, lanes),
        {"cpu": f"({{{{ typedef uint16_t hidet_h __attribute__((vector_size({2 * lanes}), aligned(2), may_alias)); "
                f"float32x{lanes} hidet_f; "
                f'__asm__("vcvtph2ps %1, %0" : "=v"(hidet_f) : "m"(*(const hidet_h *)({{0}}))); hidet_f; }}}})'}))


_PRIMITIVES = {(lanes, kind): (_f16_primitive(lanes) if kind == "float16" else _bf16_primitive(lanes, kind == "high"))
               for lanes in (8, 16) for kind in ("low", "high", "float16")}


def half_panel_load(dtype: str, lanes: int, b_at: Callable) -> Callable:
    """`make_register_tile`'s ``b_load`` for half panels: float32 vector v of B at step
    kk, where ``b_at(b, where, kk, c)`` is the panel element of storage column c."""
    if dtype == "float16":
        load = _PRIMITIVES[(lanes, "float16")]
        return lambda b, where, kk, v: load(address_of(b_at(b, where, kk, v * lanes)))
    low, high = _PRIMITIVES[(lanes, "low")], _PRIMITIVES[(lanes, "high")]
    return lambda b, where, kk, v: (high if v % 2 else low)(address_of(b_at(b, where, kk, v // 2 * 2 * lanes)))
