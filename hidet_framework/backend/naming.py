"""Safe C identifiers for everything that reaches generated source.

Names in the IR come from users (operator names, tensor names, script function names),
so they can hold anything: quotes, newlines, ``*/``, ``#include``, unicode, leading
digits, C keywords, or nothing at all. Pasted into C source any of these would break the
build or, worse, inject code. Every name a code generator prints therefore goes through
:func:`c_identifier` (a pure function of the string) and, where names must also be
distinct, through a :class:`NameScope`.
"""
from __future__ import annotations

import hashlib
import re

__all__ = ["C_KEYWORDS", "CUDA_RESERVED", "c_identifier", "is_reserved", "NameScope"]

# C11 keywords plus the C23/C++ words a compiler in another mode may treat as keywords.
C_KEYWORDS: frozenset[str] = frozenset(
    """
    auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex
    _Generic _Imaginary _Noreturn _Static_assert _Thread_local
    alignas alignof bool false true nullptr static_assert thread_local typeof constexpr
    asm class delete new namespace operator private protected public template this throw
    try catch typename using virtual friend mutable explicit export noexcept decltype
    """.split()
)

# Names that CUDA C++ / the runtime headers / OpenMP / libc already define: shadowing them
# in generated code either fails to compile or silently changes meaning.
CUDA_RESERVED: frozenset[str] = frozenset(
    """
    threadIdx blockIdx blockDim gridDim warpSize dim3 half bfloat16 float2 float4 int2 int4
    uint2 uint4 half2 nv_bfloat16 nv_bfloat162 main printf malloc free memcpy memset
    abs min max errno NULL assert omp_get_thread_num omp_get_num_threads
    exp exp2 expf log log2 log1p logf sqrt sqrtf pow powf sin cos tan sinf cosf tanh tanhf erf
    erff fabs fabsf floor ceil round trunc fmin fmax fminf fmaxf fma fmaf rsqrt
    """.split()
)

_INVALID = re.compile(r"[^A-Za-z0-9_]+")
_MAX_LEN = 200  # far below every compiler's limit; long names get a hash suffix instead


def is_reserved(name: str) -> bool:
    """True when `name` may not be defined by generated code: keywords, names the
    toolchains define, and names C reserves for the implementation (``__x``, ``_X``)."""
    return (
        name in C_KEYWORDS
        or name in CUDA_RESERVED
        or name.startswith("__")
        or (len(name) >= 2 and name[0] == "_" and name[1].isupper())
    )


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def c_identifier(name: str) -> str:
    """Turn any string into a valid, non-reserved C identifier of ``[A-Za-z0-9_]``.

    Readable names stay as they are (``"conv1"`` → ``"conv1"``). Anything else is
    folded: runs of other characters become one ``_``. When folding lost information
    (two different hostile names could otherwise meet), an 8-hex-digit hash of the
    original is appended so the mapping stays injective in practice and deterministic
    (it feeds cache keys).
    """
    if not isinstance(name, str):
        raise TypeError(f"c_identifier expects a str, got {type(name).__name__}")
    folded = _INVALID.sub("_", name).strip("_")
    # Leading underscores were stripped above, so `_X` / `__x` cannot survive here.
    lossy = folded != name
    if not folded:
        folded = "v"
    if folded[0].isdigit():
        folded, lossy = "v_" + folded, True  # else "1a" and "v_1a" would meet
    if folded in C_KEYWORDS or folded in CUDA_RESERVED:
        folded = folded + "_"
    if len(folded) > _MAX_LEN:
        folded, lossy = folded[:_MAX_LEN].rstrip("_"), True
    if lossy:
        folded = f"{folded}_{_short_hash(name)}"
    return folded


class NameScope:
    """Hands out identifiers unique within one generated translation unit (or function).

    ``scope.unique("x")`` → ``x``, then ``x_1``, ``x_2``, ...; hints are made safe by
    :func:`c_identifier` first. Names the scope must never produce (e.g. globals of an
    enclosing scope, runtime helpers) are passed as `reserved`.
    """

    def __init__(self, reserved: "set[str] | frozenset[str] | tuple[str, ...]" = ()) -> None:
        self._taken: set[str] = set(reserved)
        self._next_suffix: dict[str, int] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._taken

    def reserve(self, name: str) -> None:
        """Mark `name` as used so :meth:`unique` never returns it."""
        self._taken.add(name)

    def unique(self, hint: str = "v") -> str:
        base = c_identifier(hint)
        candidate = base
        suffix = self._next_suffix.get(base, 0)
        while candidate in self._taken or is_reserved(candidate):
            suffix += 1
            candidate = f"{base}_{suffix}"
        self._next_suffix[base] = suffix
        self._taken.add(candidate)
        return candidate
