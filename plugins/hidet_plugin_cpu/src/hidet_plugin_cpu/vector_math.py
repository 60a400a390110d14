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
``errno``, and the flag changes no value.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import subprocess

__all__ = ["VECTOR_FUNCTIONS", "ULP_BOUNDS", "available_vector_functions", "declarations", "link_flags"]

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
# log 3.77, erf 3.96 (just below 1, where the result rounds to 1.0 early), tanh 1.34
# (scalar libm tanhf 2.07), sin 1.57, cos 1.85; glibc documents 4 ULP for its float
# vector functions, which caps every bound here.
ULP_BOUNDS: dict[str, float] = {"exp": 3.0, "log": 4.0, "erf": 4.0, "tanh": 3.0, "sin": 2.0, "cos": 2.0,
                                "pow": 4.0}

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
