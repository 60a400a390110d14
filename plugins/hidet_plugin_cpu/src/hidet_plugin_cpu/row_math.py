"""C helpers of the CPU row kernels (the softmax), placed into a generated source by
`vector_math.place_own_functions` where it calls them.

**Row reductions** ``hidet_row_max_f32(p, n)`` / ``hidet_row_sum_f32(p, n)``: the max
and the sum of a kernel's ``n`` lane accumulators (``n`` = 8, 16, ..., 128), as a
halving tree (``p[j] op= p[j + h]`` for h = n/2, ..., 1: the order of the tree the
row kernels write out element by element) on GCC vector types, so every step is one
vector instruction. Written element by element, gcc vectorized only the first step
and turned the rest into about 60 scalar shuffles and maxss/addss per tree; two such
trees per 128-float softmax row were a quarter of its time (0.78 -> 0.61 ms for
12288 rows, one thread, AVX-512). The max step is the IR's ``max`` (a NaN is kept, as
numpy's maximum; session 14).

**exp and sum of a row** ``hidet_exp_sum_f32(e, top, n)``: ``e[j] = hidet_expf(e[j] -
top)`` in place and their sum (32 lane accumulators, ``hidet_row_sum_f32``, then the
tail in order), the softmax's middle pass. Where gcc targets AVX-512 the blocks of 32
are written with intrinsics: vscalefps does the two-step 2^n and both selects of
hidet_expf in one instruction (clamping the argument to [-104, 88.8] first keeps -inf,
+inf and NaN right), otherwise the same operations in the same order, so the values
are hidet_expf's bits (tested bit for bit). 12288 rows of 128: 0.60 -> 0.50 ms on one
thread (Zen 4). Other ISAs get the plain loop over hidet_expf.
"""
from __future__ import annotations

__all__ = ["ROW_FUNCTIONS", "exp_sum_definition"]


def _sum_step(vector: str, mask: str, a: str, b: str) -> str:
    return f"{a} + {b}"


def _max_step(vector: str, mask: str, a: str, b: str) -> str:
    """The IR's ``max(a, b)`` (``a != a || a > b ? a : b``: a NaN is kept, as numpy's
    maximum, codegen.py's hidet_max_float32); on vectors as a bitwise select (C has no
    ``?:`` on vectors)."""
    if not mask:
        return f"({a} != {a} || {a} > {b}) ? {a} : {b}"
    take = f"(({mask})({a} != {a}) | ({mask})({a} > {b}))"
    return f"({vector})((({mask}){a} & {take}) | (({mask}){b} & ~{take}))"


def _row_reduction(name: str, step) -> str:
    """hidet_row_sum_f32 / hidet_row_max_f32: the n floats at p (n = 8 * 2^k <= 128)
    reduced by the halving tree, `step` one step on a type (vector, mask) or float."""
    halves = ("__builtin_shufflevector({v}, {v}, {lo})", "__builtin_shufflevector({v}, {v}, {hi})")

    def split(v: str, width: int, a: str, b: str, vector: str) -> list[str]:
        lo, hi = ", ".join(map(str, range(width))), ", ".join(map(str, range(width, 2 * width)))
        return ["#ifdef HIDET_SHUFFLEVECTOR",
                f"    {vector} {a} = {halves[0].format(v=v, lo=lo)}, {b} = {halves[1].format(v=v, hi=hi)};",
                "#else",
                f"    {vector} {a}, {b};",
                f"    memcpy(&{a}, &{v}, sizeof {a});",
                f"    memcpy(&{b}, (const float*)&{v} + {width}, sizeof {b});",
                "#endif"]

    def halving(vector: str, mask: str, width: int) -> list[str]:
        """the tree on `width`-float vectors while the halves are that wide"""
        return [f"    {vector} w[128 / {width}];",
                f"    for (int i = 0; i < n / {width}; ++i) memcpy(&w[i], p + {width} * i, sizeof w[i]);",
                f"    for (int h = n / {2 * width}; h >= 1; h /= 2)",
                f"        for (int i = 0; i < h; ++i) w[i] = {step(vector, mask, 'w[i]', 'w[i + h]')};"]

    return "\n".join([
        "#if !defined(HIDET_SHUFFLEVECTOR) && defined(__has_builtin)",
        "#if __has_builtin(__builtin_shufflevector)",
        "#define HIDET_SHUFFLEVECTOR 1  /* gcc >= 12, clang: else the halves go through memcpy */",
        "#endif",
        "#endif",
        f"static inline float {name}(const float* p, int n) {{  /* row_math.py: n = 8 * 2^k <= 128 */",
        "    typedef float f16v __attribute__((vector_size(64)));",
        "    typedef int32_t i16v __attribute__((vector_size(64)));",
        "    typedef float f8v __attribute__((vector_size(32)));",
        "    typedef int32_t i8v __attribute__((vector_size(32)));",
        "    typedef float f4v __attribute__((vector_size(16)));",
        "    typedef int32_t i4v __attribute__((vector_size(16)));",
        "    /* vectors no wider than the ISA's: gcc splits wider ones into scalar compares */",
        "#if defined(__AVX512F__)",
        "    f8v v;",
        "    if (n >= 16) {",
        *["    " + line for line in halving("f16v", "i16v", 16)],
        *["    " + line if not line.startswith("#") else line for line in split("w[0]", 8, "lo", "hi", "f8v")],
        f"        v = {step('f8v', 'i8v', 'lo', 'hi')};",
        "    } else {",
        "        memcpy(&v, p, sizeof v);",
        "    }",
        *split("v", 4, "a", "b", "f4v"),
        f"    a = {step('f4v', 'i4v', 'a', 'b')};",
        "#elif defined(__AVX__)",
        *halving("f8v", "i8v", 8),
        *split("w[0]", 4, "a", "b", "f4v"),
        f"    a = {step('f4v', 'i4v', 'a', 'b')};",
        "#else",
        *halving("f4v", "i4v", 4),
        "    f4v a = w[0];",
        "#endif",
        "    float c = a[0], d = a[1], e = a[2], f = a[3];",
        f"    c = {step('float', '', 'c', 'e')};",
        f"    d = {step('float', '', 'd', 'f')};",
        f"    return {step('float', '', 'c', 'd')};",
        "}"])


def exp_sum_definition(exp_p: tuple) -> str:
    """hidet_exp_sum_f32(e, top, n): e[j] = hidet_expf(e[j] - top) in place for j < n,
    and their sum: 32 lane accumulators (lane j % 32) combined by hidet_row_sum_f32,
    then the tail past the last multiple of 32 in order. With AVX-512 the blocks of 32
    use vscalefps for the 2^n of hidet_expf (one instruction for the two-step scaling
    and its selects; the clamps to [-104, 88.8] keep -inf, +inf and NaN right): the
    same operations in the same order otherwise, so the same bits."""
    c = [v.rstrip("f") + "f" for v in exp_p]  # hidet_expf's coefficients (vector_math.EXP_P)
    return "\n".join([
        "#ifdef __AVX512F__",
        "#include <immintrin.h>",
        "#endif",
        "static inline float hidet_exp_sum_f32(float* e, float top, int n) {  /* row_math.py */",
        "    float part[32];",
        "    int j = 0;",
        "#ifdef __AVX512F__",
        "    const __m512 vt = _mm512_set1_ps(top), lo = _mm512_set1_ps(-104.0f), hi = _mm512_set1_ps(88.8f);",
        "    const __m512 log2e = _mm512_set1_ps(1.44269504f), magic = _mm512_set1_ps(12582912.0f);",
        "    const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f), ln2_lo = _mm512_set1_ps(1.42860677e-06f);",
        f"    const __m512 c0 = _mm512_set1_ps({c[0]}), c1 = _mm512_set1_ps({c[1]}), c2 = _mm512_set1_ps({c[2]});",
        f"    const __m512 c3 = _mm512_set1_ps({c[3]}), c4 = _mm512_set1_ps({c[4]}), one = _mm512_set1_ps(1.0f);",
        "    __m512 s[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};",
        "    for (; j + 32 <= n; j += 32) {",
        "        for (int h = 0; h < 2; ++h) {",
        "            __m512 x = _mm512_sub_ps(_mm512_loadu_ps(e + j + 16 * h), vt);",
        "            __m512 c = _mm512_min_ps(hi, _mm512_max_ps(lo, x));  /* NaN: the second operand, x */",
        "            __m512 nn = _mm512_sub_ps(_mm512_fmadd_ps(c, log2e, magic), magic);",
        "            __m512 r = _mm512_fnmadd_ps(nn, ln2_lo, _mm512_fnmadd_ps(nn, ln2_hi, c));",
        "            __m512 p = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_fmadd_ps(",
        "                _mm512_fmadd_ps(c4, r, c3), r, c2), r, c1), r, c0), r, one);",
        "            p = _mm512_scalef_ps(p, nn);",
        "            _mm512_storeu_ps(e + j + 16 * h, p);",
        "            s[h] = _mm512_add_ps(s[h], p);",
        "        }",
        "    }",
        "    _mm512_storeu_ps(part, s[0]);",
        "    _mm512_storeu_ps(part + 16, s[1]);",
        "#else",
        "    for (int l = 0; l < 32; ++l) part[l] = 0.0f;",
        "    for (; j + 32 <= n; j += 32)",
        "        for (int l = 0; l < 32; ++l) {",
        "            float v = hidet_expf(e[j + l] - top);",
        "            e[j + l] = v;",
        "            part[l] = part[l] + v;",
        "        }",
        "#endif",
        "    float total = hidet_row_sum_f32(part, 32);",
        "    for (; j < n; ++j) {",
        "        e[j] = hidet_expf(e[j] - top);",
        "        total = total + e[j];",
        "    }",
        "    return total;",
        "}"])


ROW_FUNCTIONS: dict[str, str] = {
    "hidet_row_sum_f32": _row_reduction("hidet_row_sum_f32", _sum_step),
    "hidet_row_max_f32": _row_reduction("hidet_row_max_f32", _max_step),
}
