"""The C code generator of the ``cpu`` target: C11 + OpenMP + GCC vector extensions.

What the output looks like::

    #include <stdint.h> ... <omp.h>
    #define HIDET_EXPORT __attribute__((visibility("default")))
    (bfloat16 / float16 helpers, min/max helpers, hidet_assert_fail, vector typedefs)
    /* prototypes */
    HIDET_EXPORT void add(float* __restrict__ a, ..., int32_t n);
    /* hidet function: add */
    HIDET_EXPORT void add(float* __restrict__ a, ..., int32_t n) {
        { struct add_par0_ctx hidet_ctx = {a, b, c};
          hidet_parallel_for(add_par0_task, &hidet_ctx, (int64_t)(n), 32768); }
    }                       (add_par0: the loop over [begin, end), see parallel.py)

Rules:

- ``public`` and ``cpu_kernel`` functions are exported (C linkage, default visibility)
  under ``c_identifier(name)``, the symbol the runtime looks up; ``device``/``host``
  helpers are ``static inline``. CUDA kernels cannot be printed here.
- A ``ForStmt(parallel=True)`` becomes a task of the process's thread pool: the body
  is outlined into a function of an iteration range, its free variables captured by
  value, and ``hidet_parallel_for`` runs chunks of iterations on the pool's threads
  (the caller included), claimed dynamically; loops with little work stay serial
  (``parallel.py``, ``thread_pool.py``). Variables declared inside the body are private
  to an iteration; the body must not write a variable declared outside it (other than
  tensor elements each iteration owns) and must not ``break``.
- ``unroll=N`` → ``#pragma GCC unroll N``; ``unroll=True`` unrolls fully when the extent
  is a constant.
- float16 is ``_Float16`` and bfloat16 is stored as its ``uint16_t`` bit pattern.
  Arithmetic on either happens in float: reads convert to float, and stores (and
  casts to the type, which round) convert back. Scalar float16 parameters of exported
  functions travel as their bits (``uint16_t``), as the runtime passes them.
- Vector types (``vector_type(float32, 8)``) are GCC vector types
  (``typedef float float32x8 __attribute__((vector_size(32)))``): ``+ - * /`` work
  lane-wise, and with ``-march=native`` they compile to AVX2/AVX-512.
  A vectorized load is a dereference of a tensor element's address cast to a vector
  pointer, a store is a store through that pointer::

      vp = pointer_type(float32x8)
      v = Dereference(cast(Address(a[i]), vp))          # *(float32x8_u*)&a[i]
      BufferStoreStmt(cast(Address(c[i]), vp), [0], v)  # ((float32x8_u*)&c[i])[0] = v

  Vector pointers use the ``<name>_u`` typedef, aligned like one element, so ``i``
  need not be a multiple of the lane count and numpy's 16-byte alignment suffices.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.backend.c_style import PRIMARY, UNARY, CodegenError, CStyleCodegen
from hidet_framework.backend.signature import FunctionSignature, function_signature
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Cast, Constant, Expr, Var
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.stmt import BufferStoreStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, SeqStmt, WhileStmt
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import PointerType, Scope

from . import primitives as _primitives  # noqa: F401  (registers the cpu math primitives)
from . import vector_math
from .build import COMPILER
from .parallel import DISPATCH, DISPATCH_NAMES, Outliner

__all__ = ["CCodegen", "generate", "signatures", "public_signatures"]

ENTRY_KINDS = ("public", "cpu_kernel")
_HALF_TYPES = (dtypes.float16, dtypes.bfloat16)
_MINMAX_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")
_VECTOR_LANES = (2, 4, 8, 16, 32, 64)
_GCC_MAX_UNROLL = 65534
_FULL_UNROLL_LIMIT = 64  # longest loop a full-unroll hint is passed on for

_HELPERS = r"""
#define HIDET_EXPORT __attribute__((visibility("default")))

/* bfloat16 lives in memory as the upper half of a float's bits; computed in float. */
static inline float hidet_bf16_to_f32(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t hidet_f32_to_bf16(float f) {  /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* float16 scalars cross the ABI as their bits (ctypes has no half type). */
static inline _Float16 hidet_f16_from_bits(uint16_t bits) {
    _Float16 h;
    memcpy(&h, &bits, sizeof h);
    return h;
}
static inline void hidet_assert_fail(const char* message) {
    fprintf(stderr, "%s\n", message);
    fflush(stderr);
    abort();
}
"""


def _min_max_body(op: str, t: str, c: str) -> str:
    """The body of the IR's ``min``/``max`` of two `t` (C type `c`) values `a`, `b`: for
    integers ``return b < a ? b : a;``; for floats numpy's ``minimum``/``maximum``: a NaN
    operand is the result (`a` when both are) and a tie (-0.0 and 0.0) gives `b`
    (evaluator_values._min/_max, the CUDA preamble's hidet_min/hidet_max). Spelt ``m = a > b ? a : b`` (vmaxps: `b` on a
    tie or a NaN) then ``a != a ? a : m``, gcc vectorizes it into vmaxps, an unordered
    compare of `a` and a blend: three instructions, and where `a` is the new value of a
    fold (``max(x, acc)``: the kernels write it so) the compare is off the accumulator's
    dependency chain: ResNet-50's blocked max pool runs as fast as with the plain vmaxps
    (docs/perf_notes.md, session 14 nanfix)."""
    if not t.startswith("float"):
        return f"return b {'<' if op == 'min' else '>'} a ? b : a;"
    return f"{c} m = a {'<' if op == 'min' else '>'} b ? a : b; return a != a ? a : m;"


def _min_max_const_body(op: str) -> str:
    """The body of ``hidet_<op>_const_<t>(a, b)``: the same function as `_min_max_body`'s
    where `b` is a constant that is not NaN (relu's ``max(x, 0)``, clip's bounds). Then
    ``a <= b ? b : a`` is exact: a NaN `a` fails the compare and is the result, a tie
    (-0.0 with 0.0 included) gives `b`. One compare and one blend once vectorized,
    against the general helper's two of each (MobileNet-V2's clipped depthwise layers
    ran ~1.4x slower with the general one; docs/perf_notes.md, session 15)."""
    return f"return a {'<=' if op == 'max' else '>='} b ? b : a;"


def _non_nan_float_constant(e: Expr) -> bool:
    return (isinstance(e, Constant) and isinstance(e.dtype, DataType) and e.dtype.is_float()
            and e.dtype.lanes == 1 and e.value == e.value)


class CCodegen(CStyleCodegen):
    """C for the cpu target; see the module docstring for the rules."""

    target_kind = "cpu"
    SCALAR_TYPE_NAMES = {**CStyleCodegen.SCALAR_TYPE_NAMES, "float16": "_Float16", "bfloat16": "uint16_t"}

    def __init__(self, target: Any = None) -> None:
        super().__init__(target)
        self.vector_types: dict[str, DataType] = {}
        self.outliner = Outliner(self)

    def generate(self, module: IRModule) -> str:
        self.outliner = Outliner(self)
        return vector_math.place_own_functions(self.outliner.place(super().generate(module)))

    # ------------------------------------------------------------- module level
    def entry_kinds(self) -> tuple[str, ...]:
        return ENTRY_KINDS

    def reserved_names(self) -> set[str]:
        names = {"HIDET_EXPORT", "hidet_bf16_to_f32", "hidet_f32_to_bf16", "hidet_f16_from_bits",
                 "hidet_assert_fail", "omp_get_thread_num", "omp_get_num_threads", "INFINITY", "NAN"}
        names |= {f"hidet_{op}_{t}" for op in ("min", "max") for t in _MINMAX_TYPES}
        names |= {f"hidet_{op}_const_{t}" for op in ("min", "max") for t in _MINMAX_TYPES if t.startswith("float")}
        names |= set(DISPATCH_NAMES) | set(vector_math.OWN_FUNCTIONS)
        for t in dtypes.SCALAR_TYPES:  # every vector typedef a module might need
            names |= {f"{t.name}x{n}{u}" for n in _VECTOR_LANES for u in ("", "_u")}
        return names

    def preamble(self, module: IRModule) -> list[str]:
        lines = [f"#include <{h}>" for h in ("stdint.h", "stdbool.h", "math.h", "omp.h", "stdio.h",
                                             "stdlib.h", "string.h")]
        lines += _HELPERS.splitlines()
        # SIMD variants of libm functions (libmvec) this machine has, so loops calling
        # them vectorize; see vector_math.py.
        lines += vector_math.declarations(vector_math.available_vector_functions(COMPILER))
        for t in _MINMAX_TYPES:  # evaluated once each; the IR's min/max (numpy's minimum/maximum)
            c = self.SCALAR_TYPE_NAMES[t]
            lines += [f"static inline {c} hidet_{op}_{t}({c} a, {c} b) {{ {_min_max_body(op, t, c)} }}"
                      for op in ("min", "max")]
            if t.startswith("float"):
                lines += [f"static inline {c} hidet_{op}_const_{t}({c} a, {c} b) {{ {_min_max_const_body(op)} }}"
                          for op in ("min", "max")]
        if self.outliner.pieces:  # the thread pool's entry (parallel.py)
            lines += DISPATCH.splitlines()
        for name, t in sorted(self.vector_types.items()):
            elem, size = self.scalar_type_name(t.element), t.nbytes
            lines += [f"typedef {elem} {name} __attribute__((vector_size({size})));",
                      f"typedef {elem} {name}_u __attribute__((vector_size({size}), aligned({t.element.nbytes})));"]
        return lines

    def function_qualifiers(self, fn: Function) -> str:
        if fn.kind == "cuda_kernel":
            raise CodegenError(f"{fn.name!r} is a CUDA kernel; the cpu target cannot print it")
        return "HIDET_EXPORT" if fn.kind in ENTRY_KINDS else "static inline"

    def param_decl(self, fn: Function, param: Var, name: str) -> tuple[str, list[str]]:
        if fn.kind in ENTRY_KINDS and param.type is dtypes.float16:
            bits = self.scope.unique(name + "_bits")
            return f"uint16_t {bits}", [f"_Float16 {name} = hidet_f16_from_bits({bits});"]
        return super().param_decl(fn, param, name)

    def scope_prefix(self, scope: Scope) -> str:
        if scope in (Scope.LOCAL, Scope.REGISTER):  # both are plain locals; gcc picks registers
            return ""
        raise CodegenError(f"cpu: cannot declare a variable in {scope.value} scope (only local/register)")

    def for_pragmas(self, s: Any) -> list[str]:
        pragmas = self._for_pragmas(s)
        return pragmas + ["#pragma GCC ivdep"] if stores_in_place(self.function, s) else pragmas

    def _for_pragmas(self, s: Any) -> list[str]:
        if s.parallel:  # serial when the loop is too small to share (parallel.py)
            mode, _ = self.outliner.decide(s)
            schedule = "dynamic" if s.parallel == "dynamic" else "static"   # lang's parallel(n, schedule=...)
            return [f"#pragma omp parallel for schedule({schedule})"] if mode == "openmp" else []
        if s.unroll is True:
            # A full-unroll hint is advice: past a few dozen copies it only costs compile
            # time (gcc spent minutes on a 2048-step repeat loop of a simple template).
            if isinstance(s.extent, Constant) and 0 < s.extent.value <= _FULL_UNROLL_LIMIT:
                return [f"#pragma GCC unroll {int(s.extent.value)}"]
            return []
        if s.unroll is not None and s.unroll is not False:
            return [f"#pragma GCC unroll {max(0, min(int(s.unroll), _GCC_MAX_UNROLL))}"]
        return []

    def stmt_ForStmt(self, s: Any) -> None:
        if s.parallel:
            mode, grain = self.outliner.decide(s)
            if mode == "pool":  # a task of the thread pool (parallel.py)
                self.outliner.emit_call(s, grain)
                return
        super().stmt_ForStmt(s)

    # ------------------------------------------------------------------ types
    def vector_type_name(self, t: DataType) -> str:
        if t.element.is_bool() or t.element is dtypes.bfloat16:
            raise CodegenError(f"cpu: vector type {t.name} is not supported (no arithmetic on it in C)")
        self.vector_types[t.name] = t
        return t.name

    def pointer_type_name(self, t: PointerType) -> str:
        if isinstance(t.base, DataType) and t.base.lanes > 1:
            return self.vector_type_name(t.base) + "_u*"  # element-aligned: see module docstring
        return super().pointer_type_name(t)

    # ------------------------------------------------- float16 / bfloat16 values
    HALF_TO_FLOAT = {dtypes.float16: "((float){0})", dtypes.bfloat16: "hidet_bf16_to_f32({0})"}
    FLOAT_TO_HALF = {dtypes.float16: "((_Float16)({0}))", dtypes.bfloat16: "hidet_f32_to_bf16({0})"}

    def cast_value(self, e: Expr, t: Any) -> tuple[str, int]:
        if isinstance(t, DataType) and t.lanes > 1:
            source = infer_type(e)
            if isinstance(source, DataType) and source.lanes == t.lanes:
                return f"__builtin_convertvector({self.expr(e)}, {self.type_name(t)})", PRIMARY
            if isinstance(e, (Var, Constant)):  # broadcast a simple scalar
                one = self.expr(Cast(e, t.element), UNARY)
                return f"({self.type_name(t)}){{{', '.join([one] * t.lanes)}}}", PRIMARY
            raise CodegenError(f"cpu: broadcast to {t} needs a variable or constant operand, got {e}")
        return super().cast_value(e, t)

    def expr_BinaryOp(self, e: Any) -> tuple[str, int]:
        t = infer_type(e)
        if e.op in ("min", "max") and isinstance(t, DataType) and t.lanes == 1 and t.is_float() \
                and _non_nan_float_constant(e.b):
            name = "float32" if t in _HALF_TYPES else t.name
            return f"hidet_{e.op}_const_{name}({self.expr(e.a)}, {self.expr(e.b)})", PRIMARY
        return super().expr_BinaryOp(e)

    def min_max(self, op: str, t: DataType, a: str, b: str) -> str:
        if t.lanes > 1:
            raise CodegenError(f"cpu: {op} of vector type {t} is not supported")
        name = "float32" if t in _HALF_TYPES else "uint8" if t.is_bool() else t.name
        return f"hidet_{op}_{name}({a}, {b})"

    def assert_failure(self, message: str) -> list[str]:
        return [f"hidet_assert_fail({message});"]


def stores_in_place(fn: Function | None, s: Any) -> bool:
    """`s` is an innermost serial loop (no loop inside) that stores into a parameter of `fn`
    marked ``aliased_params`` (an in-place output, `fusion/inplace.py`). Printed without
    ``__restrict__``, that output and its input make gcc version the loop on an address
    test whose overlap side, taken when they are the same buffer (in place), is the scalar
    loop; the in-place proof says the input is read only at the output's own index, before
    the store, so no iteration depends on another through them and ``#pragma GCC ivdep``
    is true (every other pointer parameter is restrict)."""
    marked = fn.attrs.get("aliased_params", ()) if fn is not None else ()
    if not marked or s.parallel:
        return False
    aliased = [fn.params[p] for p in marked]
    stores, stack = False, [s.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (ForStmt, ForMappingStmt, WhileStmt)):
            return False
        if isinstance(node, SeqStmt):
            stack.extend(node.stmts)
        elif isinstance(node, LetStmt):
            stack.append(node.body)
        elif isinstance(node, IfStmt):
            stack += [node.then_body, node.else_body]
        elif isinstance(node, BufferStoreStmt):
            stores = stores or any(node.base is a for a in aliased)
    return stores


def generate(module: IRModule, target: Any = None) -> str:
    """C source of a lowered IR module."""
    return CCodegen(target).generate(module)


def signatures(module: IRModule) -> dict[str, FunctionSignature]:
    """Signatures of the module's exported (public and cpu_kernel) functions, by name."""
    return {fn.name: function_signature(fn, f"function {fn.name!r}")
            for fn in module.functions.values() if fn.kind in ENTRY_KINDS}


def public_signatures(module: IRModule) -> list[FunctionSignature]:
    """`signatures` as a list (what ``runtime.signatures_of`` asks for)."""
    return list(signatures(module).values())
