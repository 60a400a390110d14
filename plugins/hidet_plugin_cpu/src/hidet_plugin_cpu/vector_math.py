"""Vector math for generated C: glibc's libmvec, reached by ``omp declare simd``.

gcc vectorizes a loop that calls ``expf`` only when it knows a SIMD variant of
``expf`` exists. glibc declares its libmvec variants (``_ZGVdN8v_expf``: AVX2, 8
lanes; ``_ZGVeN16v_expf``: AVX-512, 16 lanes; ``b``/``c``: SSE4/AVX) to gcc only
under ``-ffast-math``, which would also let gcc reassociate sums, drop NaN and
infinity semantics and flush denormals in every kernel. Instead, the generated source
declares the variants itself (``#pragma omp declare simd notinbranch`` before the
prototype, exactly what glibc's header does under fast-math) and links ``-lmvec``;
nothing else about floating point changes. gcc then picks the variant for the ISA
``-march=native`` enables (AVX2 or AVX-512 on the building machine), so the choice of
ISA is made at build time from the machine, and the build cache key holds the ISA.

Why libmvec: it ships with glibc (nothing to install in CI or for users; the same
library onnxruntime's and numpy's peers call through their compilers), its float
variants are within a few ULP (measured bounds in `ULP_BOUNDS`, tested over every
binade of the float range, NaN, infinities and denormals included), and special values
go through its scalar fallback path. SLEEF has no PyPI wheel with headers; polynomial
kernels of our own would be more code to keep accurate for the same result.

Which functions get a variant is probed once per process: the symbol must be in this
machine's ``libmvec.so.1`` (erf and tanh arrived in glibc 2.35) and gcc must find
``libmvec.so`` to link it. Elsewhere (musl, macOS, old glibc, non-x86) calls stay
scalar libm calls: correct, only slower.

``-fno-math-errno`` (in `build.py`'s flags) is needed too: a call that may set
``errno`` counts as a memory write to gcc's vectorizer. Generated code never reads
``errno``, and the flag changes no value. So is ``-fno-trapping-math``: without it gcc
keeps the clamps of the own erf and tanh below as branches when it targets AVX2 (AVX-512
if-converts them with masks) and their callers' loops stay scalar (gelu at 0.14-0.19x
onnxruntime with AVX2 code; tests/plugins/cpu/test_machine_defaults.py compiles them
with ``-march=haswell`` and checks for ymm registers).

**erf of our own (float32).** Generated code spells erf ``hidet_erff`` /
``hidet_erf`` (primitives.C_MATH); `place_own_functions` puts their definitions into
a source that calls them (and only there: other sources stay byte-identical).
``hidet_erf`` (float64) is libm's / libmvec's ``erf``. ``hidet_erff`` is a rational
function fitted here (Loeb's iterated weighted least squares in float64, relative
error, on x in [0, 4]; the coefficients are below, 0.24 ULP in float64 arithmetic)::

    t = min(|x|, 3.92)            erf rounds to 1 in float32 past 3.84; NaN stays NaN
    erf(x) = copysign(t * P(t^2) / Q(t^2), x)       P, Q of degree 5, Q(0) = 1

declared ``omp declare simd`` and ``static inline``, so gcc vectorizes the loops that
call it for the ISA ``-march=native`` enables (AVX-512 or AVX2): 11 FMAs, a division
and four bit/compare operations per vector, with no table lookup and no special-case
branch. In gelu's loop (C harness, 64k floats in cache, AVX-512, Zen 4) it ran about
twice as fast as libmvec's ``_ZGVeN16v_erff``. Accuracy in float32 arithmetic (FMA
contracted): at most 5.2 ULP measured (x near 3.7, where erf is 1 - 2e-7 and the
Horner rounding of P and Q dominates; libmvec's erff: 3.96), so its stated bound is 6
ULP (`ULP_BOUNDS`), tested over every binade, denormals (erf(x) = 2x/sqrt(pi) there,
to a denormal ULP), +-0 (sign kept), +-inf (+-1) and NaN.

**tanh of our own (float32)**, ``hidet_tanhf``, the same construction (gelu's tanh
form spent most of its time in libmvec's ``_ZGVeN16v_tanhf``)::

    t = min(|x|, 9.1)             tanh rounds to 1 in float32 past 9.01; NaN stays NaN
    m = min(t * P(t^2) / Q(t^2), 1)                  P, Q of degree 5, P(0) = Q(0) = 1
    tanh(x) = copysign(m, x)

(the last ``min`` keeps the result's magnitude at most 1 where the rounding of P and Q
would give 1 + 2^-23). In gelu's loop (C harness, AVX-512, Zen 4) 1.2x libmvec's
speed in cache and 1.45x streaming 16M floats. Accuracy in float32 arithmetic (FMA
contracted): at most 5.37 ULP, measured over every float in [2^-7, 9.1] (x near 7.8,
where tanh is 1 - 3e-7 and, as for erf, the rounding of P and Q dominates; libmvec's
tanhf: 1.34), so its stated bound is 6 ULP; tested like erf
(tests/plugins/cpu/test_own_tanh.py). ``hidet_tanh`` (float64) is libm's /
libmvec's ``tanh``.

**exp of our own (float32)**, ``hidet_expf``, for the CPU softmax (its exp pass was
most of its time in libmvec's ``_ZGVeN16v_expf``, 17-18 cycles per 16 floats on Zen 4;
this one 11-13). Kernels reach it through ``primitives.own_exp``; the ``exp`` primitive
stays libm's / libmvec's ``expf``, so other sources do not change::

    n = round(x / ln2)            x * log2(e) + 1.5 * 2^23, less 1.5 * 2^23: to nearest
    r = x - n * ln2               ln2 in two parts, the first of 16 bits: n * ln2_hi exact
    p = 1 + r * P(r)              P of degree 4 (`EXP_P`): exp on [-ln2/2, ln2/2]
    e = p * 2^m * 2^(n - m)       m = n >> 1: both factors are normal floats for every n
                                  in [-150, 128], so results below 2^-126 are the correctly
                                  rounded denormals (one rounding, in the last product)
    x < -104: +0                  exp(-104) < 2^-150 rounds to +0 (-inf included)
    x > 88.8: +inf                exp(88.73) > FLT_MAX (+inf included); NaN: both
                                  compares are false, and e is NaN

The out-of-range lanes compute garbage that the two selects replace: written as
selects of the result (not as a clamp of x, which gcc turned into four compares and
blends), they cost a compare and a masked move each. The bit work is unsigned, so
no lane (an infinity's or a NaN's bits) overflows a signed integer.

P is a minimax fit of (exp(r) - 1) / r for relative error (Lawson's iterated weighted
least squares in float64; 1.5 ULP in float64 arithmetic). Accuracy in float32
arithmetic (FMA contracted): at most 2.02 ULP measured over every float in [-104, 89]
(2.24 billion, denormal results included; the AVX-512 and the AVX2 build alike, worst
at x = 37.82), so its stated bound is 2.5 ULP
(`ULP_BOUNDS["own_exp"]`); tested over every binade, NaN, +-inf (+inf, +0), zeros (1)
and the denormal results (tests/plugins/cpu/test_own_exp.py).

**Row reductions and the softmax's exp-and-sum pass** (``hidet_row_max_f32``,
``hidet_row_sum_f32``, ``hidet_exp_sum_f32``): ``row_math.py``.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import subprocess

from .row_math import ROW_FUNCTIONS, exp_sum_definition

__all__ = ["VECTOR_FUNCTIONS", "ULP_BOUNDS", "OWN_FUNCTIONS", "EXP_P", "available_vector_functions", "declarations",
           "link_flags", "place_own_functions"]

# C name -> (argument count, C type). The core's math primitives spell these names
# (primitives.C_MATH); the float32 ones serve float32 kernels, the float64 ones float64.
VECTOR_FUNCTIONS: dict[str, tuple[int, str]] = {
    **{f"{name}f": (1, "float") for name in ("exp", "log", "erf", "tanh", "sin", "cos")},
    "powf": (2, "float"),
    **{name: (1, "double") for name in ("exp", "log", "erf", "tanh", "sin", "cos")},
    "pow": (2, "double"),
}

# Stated error bounds, in float32 ULPs of the float64 result, for vectorized lanes
# (libmvec) and the scalar tail (libm) alike; tests/plugins/cpu/test_vector_math.py
# checks them over every binade of the float range. Measured worst cases on x86-64
# glibc 2.36 (AVX-512 machine, 1500 random inputs per binade, 4 seeds): exp 2.51,
# log 3.77, sin 1.57, cos 1.85; glibc documents 4 ULP for its float vector functions,
# which caps those bounds. erf and tanh are our own (`OWN_FUNCTIONS`): erf 5.2
# measured, tanh 5.37 (every float in [2^-7, 9.1]); 6 stated for both. own_exp is
# hidet_expf (softmax's exp): 2.02 measured (every float in [-104, 89]), 2.5 stated.
ULP_BOUNDS: dict[str, float] = {"exp": 3.0, "log": 4.0, "erf": 6.0, "tanh": 6.0, "sin": 2.0, "cos": 2.0,
                                "pow": 4.0, "own_exp": 2.5}

# hidet_erff's rational function (see the module docstring): P and Q coefficients
# from the constant term up, float32-rounded.
ERF_P = ("1.1283791f", "0.19103815f", "0.052784503f", "0.0037810518f", "2.83149e-04f", "2.016634e-06f")
ERF_Q = ("1.0f", "0.502636f", "0.11432708f", "0.015000029f", "0.0011625234f", "3.7657803e-05f")
# hidet_tanhf's: fitted the same way on x in [0, 9.1], relative error of tanh(x) / x
TANH_P = ("1.0f", "0.14099306f", "0.0044260658f", "4.2275857e-05f", "1.1117763e-07f", "3.6735094e-11f")
TANH_Q = ("1.0f", "0.47432637f", "0.029201528f", "0.00050085410f", "2.6039777e-06f", "2.9509548e-09f")
# hidet_expf's: exp(r) = 1 + r * P(r) on [-ln2/2, ln2/2], minimax in relative error
EXP_P = ("0.99999970f", "0.49999151f", "0.16667636f", "0.041897923f", "0.0082903029f")


def _horner(name: str, coefficients: tuple, var: str) -> str:
    text = f"float {name} = {coefficients[-1]};"
    for c in coefficients[-2::-1]:
        text += f" {name} = {name} * {var} + {c};"
    return text


# what an own function's definition calls: placed with it, before it
OWN_DEPENDS = {"hidet_exp_sum_f32": ("hidet_expf", "hidet_row_sum_f32")}


# C name -> definition, for the functions generated code gets from us, not libm
OWN_FUNCTIONS: dict[str, str] = {
    "hidet_erff": "\n".join([
        "#pragma omp declare simd notinbranch",
        "static inline float hidet_erff(float x) {  /* vector_math.py: 6 ULP */",
        "    float t = fabsf(x);",
        "    t = t > 3.92f ? 3.92f : t;",
        "    float u = t * t;",
        "    " + _horner("p", ERF_P, "u"),
        "    " + _horner("q", ERF_Q, "u"),
        "    return copysignf(t * p / q, x);",
        "}"]),
    "hidet_erf": "static inline double hidet_erf(double x) { return erf(x); }",
    "hidet_tanhf": "\n".join([
        "#pragma omp declare simd notinbranch",
        "static inline float hidet_tanhf(float x) {  /* vector_math.py: 6 ULP */",
        "    float t = fabsf(x);",
        "    t = t > 9.1f ? 9.1f : t;",
        "    float u = t * t;",
        "    " + _horner("p", TANH_P, "u"),
        "    " + _horner("q", TANH_Q, "u"),
        "    float m = t * p / q;",
        "    m = m > 1.0f ? 1.0f : m;",
        "    return copysignf(m, x);",
        "}"]),
    "hidet_tanh": "static inline double hidet_tanh(double x) { return tanh(x); }",
    "hidet_expf": "\n".join([
        "#pragma omp declare simd notinbranch",
        "static inline float hidet_expf(float x) {  /* vector_math.py: 2.5 ULP */",
        "    float t = x * 1.44269504f + 12582912.0f;",
        "    float n = t - 12582912.0f;",
        "    float r = x - n * 0.693145751953125f;",
        "    r = r - n * 1.42860677e-06f;",
        "    " + _horner("p", EXP_P, "r"),
        "    p = p * r + 1.0f;",
        "    uint32_t u;  /* unsigned: no overflow for the bits of an infinity or a NaN */",
        "    memcpy(&u, &t, sizeof u);",
        "    int32_t k = (int32_t)(u - 0x4B400000u);  /* n */",
        "    int32_t m = k >> 1;",
        "    uint32_t b1 = (uint32_t)(m + 127) << 23, b2 = (uint32_t)(k - m + 127) << 23;",
        "    float s1, s2;",
        "    memcpy(&s1, &b1, sizeof s1);",
        "    memcpy(&s2, &b2, sizeof s2);",
        "    float e = p * s1 * s2;",
        "    e = x < -104.0f ? 0.0f : e;  /* NaN: both compares false, e is NaN */",
        "    return x > 88.8f ? INFINITY : e;",
        "}"]),
    **ROW_FUNCTIONS,
    "hidet_exp_sum_f32": exp_sum_definition(EXP_P),
}

_LIBMVEC_SONAME = "libmvec.so.1"


def _probe_symbol(name: str, arity: int, ctype: str) -> str:
    # the SSE variant exists whenever the function has any: b = SSE, 4 floats / 2 doubles
    lanes = 4 if ctype == "float" else 2
    return f"_ZGVbN{lanes}{'v' * arity}_{name}"


def _linker_finds_libmvec(compiler: str) -> bool:
    try:
        out = subprocess.run([compiler, "-print-file-name=libmvec.so"], capture_output=True, text=True,
                             timeout=60, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return os.path.isabs(out) and os.path.exists(out)


@functools.lru_cache(maxsize=None)
def available_vector_functions(compiler: str = "gcc") -> tuple[str, ...]:
    """The names of `VECTOR_FUNCTIONS` this machine's libmvec provides and gcc can
    link; empty off x86-64 Linux glibc. ``HIDET_FRAMEWORK_CPU_VECTOR_MATH=0`` turns
    them off (the scalar path, for comparison)."""
    if os.environ.get("HIDET_FRAMEWORK_CPU_VECTOR_MATH", "1") == "0":
        return ()
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return ()
    try:
        library = ctypes.CDLL(_LIBMVEC_SONAME)
    except OSError:
        return ()
    if not _linker_finds_libmvec(compiler):
        return ()
    found = []
    for name, (arity, ctype) in VECTOR_FUNCTIONS.items():
        try:
            getattr(library, _probe_symbol(name, arity, ctype))
        except AttributeError:
            continue
        found.append(name)
    return tuple(found)


def declarations(names: tuple[str, ...]) -> list[str]:
    """Prototype lines that tell gcc the SIMD variants of `names` exist."""
    lines = []
    for name in names:
        arity, ctype = VECTOR_FUNCTIONS[name]
        lines += ["#pragma omp declare simd notinbranch",
                  f"extern {ctype} {name}({', '.join([ctype] * arity)});"]
    return lines


def link_flags(names: tuple[str, ...]) -> tuple[str, ...]:
    return ("-lmvec",) if names else ()


def place_own_functions(source: str) -> str:
    """`source` with the definitions of the `OWN_FUNCTIONS` it calls inserted before
    its prototypes (after the includes and libmvec declarations they use)."""
    used = {name for name in OWN_FUNCTIONS if name + "(" in source}
    used |= {d for name in list(used) for d in OWN_DEPENDS.get(name, ())}
    used = [name for name in OWN_FUNCTIONS if name in used]  # dict order: dependencies first
    marker = "\n/* prototypes */"
    if not used or marker not in source:
        return source
    at = source.index(marker)
    return source[:at] + "\n" + "\n".join(OWN_FUNCTIONS[name] for name in used) + source[at:]
