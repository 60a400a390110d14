"""The CUDA C code generator of the ``cuda`` target, and the launch specs of its kernels.

What the output looks like::

    #include <cuda_fp16.h> / <cuda_bf16.h>
    (INFINITY/NAN, hidet_min/hidet_max, float2/float4 operators, the dynamic smem symbol)
    /* prototypes */
    extern "C" __global__ __launch_bounds__(256) void add(float* __restrict__ a, ..., int n);
    /* hidet function: add */
    extern "C" __global__ __launch_bounds__(256) void add(...) { ... }

Rules:

- ``cuda_kernel`` functions are ``extern "C" __global__`` under ``c_identifier(name)``
  (the symbol the loader looks up; `kernel_specs` names them the same), with
  ``__launch_bounds__(block threads[, attrs["min_blocks"]])``; ``block_dim`` must be
  ints. ``device`` functions are ``__device__ __forceinline__``. ``public``/``host``/
  ``cpu_kernel`` functions are refused: NVRTC compiles device code only, the Python
  runtime launches the kernels.
- Scopes: SHARED arrays are ``__shared__ __align__(16)`` (constant size, no
  initialiser); REGISTER and LOCAL are plain locals. Dynamic shared memory is the
  ``dynamic_smem`` primitive (``hidet_dyn_smem``, 1024-byte aligned bytes), viewed as a
  typed tensor with ``lang.dynamic_shared_tensor``.
- Integers are spelled with built-in types (``int``, ``long long``…): NVRTC has no
  <stdint.h>. float16 is ``__half``, bfloat16 ``__nv_bfloat16``; arithmetic on either
  happens in float (reads convert with ``__half2float``, stores and casts round with
  ``__float2half_rn``), exactly like the C backend.
- Vectors: ``float32x4`` → ``float4`` (and ``x2``, ``int``/``uint``/``double``/half pairs);
  a 16-byte access is a dereference of an element address cast to a vector pointer
  (``*(float4*)&a[i]``), which must be 16-byte aligned. ``+ - * /`` on float2/float4
  come from operators in the preamble.
- ``ForStmt.unroll`` → ``#pragma unroll [N]``; parallel loops are a CPU notion and
  refused. Asserts print the message and ``__trap()``. ``AsmStmt`` → ``asm volatile``.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from hidet_framework.backend.c_style import CodegenError, CStyleCodegen
from hidet_framework.backend.naming import c_identifier
from hidet_framework.backend.signature import param_fields
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import BinaryOp, Cast, Constant, Expr, IfThenElse, Var
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import Scope, TensorType

from . import hopper as _hopper
from . import primitives as _primitives
from .kernel import KernelSpec, ParamSpec

__all__ = ["CudaCodegen", "generate", "kernel_specs", "launch_function"]

_HALF_TYPES = (dtypes.float16, dtypes.bfloat16)
VECTOR_TYPE_NAMES = {
    "float32x2": "float2", "float32x4": "float4", "int32x2": "int2", "int32x4": "int4",
    "uint32x2": "uint2", "uint32x4": "uint4", "float64x2": "double2", "int64x2": "longlong2",
    "uint64x2": "ulonglong2", "float16x2": "__half2", "bfloat16x2": "__nv_bfloat162",
}
_MAX_BLOCK_THREADS = 1024

_PREAMBLE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
/* the IR's min/max, each operand evaluated once: numpy's minimum/maximum (a NaN operand is
   the result, a when both are; a tie gives b); `a != a` is false for integers */
template <typename T> __device__ __forceinline__ T hidet_min(T a, T b) { return (a != a || a < b) ? a : b; }
template <typename T> __device__ __forceinline__ T hidet_max(T a, T b) { return (a != a || a > b) ? a : b; }
/* lane-wise arithmetic on the float vector types the IR's float32x2/x4 print as */
#define HIDET_VEC_OPS(OP) \
  __device__ __forceinline__ float2 operator OP(float2 a, float2 b) { return make_float2(a.x OP b.x, a.y OP b.y); } \
  __device__ __forceinline__ float4 operator OP(float4 a, float4 b) { \
    return make_float4(a.x OP b.x, a.y OP b.y, a.z OP b.z, a.w OP b.w); }
HIDET_VEC_OPS(+)
HIDET_VEC_OPS(-)
HIDET_VEC_OPS(*)
HIDET_VEC_OPS(/)
#undef HIDET_VEC_OPS
/* dynamic shared memory of every kernel (its size is a launch parameter); 1024-byte
   aligned, the span of the 128-byte swizzle that wgmma descriptors address */
extern __shared__ __align__(1024) unsigned char hidet_dyn_smem[];
"""


# a CUtensorMap's storage: 128 opaque bytes, 64-byte aligned (a kernel parameter)
_TENSOR_MAP_TYPE = "struct __align__(64) hf_tensor_map_t { unsigned long long w[16]; };"


_MAPS_SEEN: dict[int, tuple] = {}  # id(fn) -> (fn kept alive, maps): asked three times per kernel printed


def _tensor_maps(fn: Function) -> list[tuple]:
    hit = _MAPS_SEEN.get(id(fn))
    if hit is None or hit[0] is not fn:
        try:
            maps = _hopper.tensor_maps_of(fn)  # a walk of the whole function
        except ValueError as exc:
            raise CodegenError(f"cuda: {exc}") from None
        if len(_MAPS_SEEN) >= 64:
            _MAPS_SEEN.clear()
        hit = _MAPS_SEEN[id(fn)] = (fn, tuple(maps))
    return list(hit[1])


def _template_identifiers() -> set[str]:
    words: set[str] = set()
    for text in _primitives.CUDA_TEMPLATES:
        words |= set(re.findall(r"[A-Za-z_]\w*", re.sub(r"\{\d+\}", " ", text)))
    return words


class CudaCodegen(CStyleCodegen):
    """CUDA C for the cuda target; see the module docstring for the rules."""

    target_kind = "cuda"
    SCALAR_TYPE_NAMES = {
        "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
        "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
        "uint64": "unsigned long long", "float16": "__half", "bfloat16": "__nv_bfloat16",
        "float32": "float", "float64": "double",
    }
    ASM_KEYWORD = "asm volatile"
    ASM_KEYWORD_NONVOLATILE = "asm"

    # ------------------------------------------------------------- module level
    def generate(self, module: IRModule) -> str:
        for fn in module.functions.values():
            if fn.kind not in ("cuda_kernel", "device"):
                raise CodegenError(
                    f"cuda: function {fn.name!r} is a {fn.kind!r} function; the cuda target prints only "
                    f"cuda_kernel and device functions (NVRTC compiles no host code: the Python runtime "
                    f"launches the kernels)")
            if fn.kind == "cuda_kernel" and fn.ret_type is not None:
                raise CodegenError(f"cuda: kernel {fn.name!r} returns {fn.ret_type}; kernels return nothing")
        return super().generate(module)

    def entry_kinds(self) -> tuple[str, ...]:
        return ("cuda_kernel",)

    def reserved_names(self) -> set[str]:
        names = {"hidet_min", "hidet_max", "HIDET_VEC_OPS", "INFINITY", "NAN", "make_float2", "make_float4",
                 _primitives.DYNAMIC_SMEM_NAME, "printf", "hf_tensor_map_t"}
        names |= set(VECTOR_TYPE_NAMES.values()) | _template_identifiers()
        return names

    def preamble(self, module: IRModule) -> list[str]:
        lines = _PREAMBLE.splitlines()
        if any(fn.kind == "cuda_kernel" and _tensor_maps(fn) for fn in module.functions.values()):
            lines.append(_TENSOR_MAP_TYPE)
        return lines

    def print_function(self, fn: Function) -> tuple[str, list[str]]:
        head, lines = super().print_function(fn)
        maps = _tensor_maps(fn) if fn.kind == "cuda_kernel" else []
        if maps:  # appended after the IR's parameters, in the order the KernelSpec lists them
            extra = [f"const __grid_constant__ hf_tensor_map_t {_hopper.TENSOR_MAP_PREFIX}{self.names[fn.params[i]]}"
                     for i, _, _ in maps]
            head = head[:-1] + ", " + ", ".join(extra) + ")"
        return head, lines

    def function_qualifiers(self, fn: Function) -> str:
        if fn.kind == "device":
            return "__device__ __forceinline__"
        threads = block_threads(fn)
        bounds = f"{threads}" if "min_blocks" not in fn.attrs else f"{threads}, {int(fn.attrs['min_blocks'])}"
        cluster = int(fn.attrs.get("cluster_size", 1))
        clusters = f" __cluster_dims__({cluster}, 1, 1)" if cluster > 1 else ""
        return f'extern "C" __global__{clusters} __launch_bounds__({bounds})'

    def scope_prefix(self, scope: Scope) -> str:
        if scope is Scope.SHARED:
            return "__shared__ __align__(16) "
        if scope in (Scope.LOCAL, Scope.REGISTER):
            return ""
        raise CodegenError(f"cuda: cannot declare a variable in {scope.value} scope inside a function")

    def stmt_DeclareStmt(self, s: Any) -> None:
        if s.scope is Scope.SHARED:
            what = f"shared variable {s.var.hint!r} in {self.function.name!r}"
            if s.init is not None:
                raise CodegenError(f"cuda: {what} cannot have an initialiser (shared memory is per block; "
                                   f"store into it from the threads)")
            t = s.var.type
            if isinstance(t, TensorType):
                size = t.layout.size if t.layout is not None else None
                dims = t.shape if size is None else (size,)
                if not all(isinstance(d, int) or isinstance(d, Constant) for d in dims):
                    raise CodegenError(f"cuda: {what} needs a constant size; use dynamic_shared_tensor for "
                                       f"sizes known at launch")
        super().stmt_DeclareStmt(s)

    def for_pragmas(self, s: Any) -> list[str]:
        if s.parallel:
            raise CodegenError(f"cuda: {self.function.name!r} has a parallel loop (a CPU construct); map "
                               f"work onto threads with a task mapping over threadIdx/blockIdx")
        if s.unroll is True:
            return ["#pragma unroll"]
        if s.unroll is not None and s.unroll is not False:
            return [f"#pragma unroll {max(1, int(s.unroll))}"]
        return []

    # ------------------------------------------------------------------ types
    def vector_type_name(self, t: DataType) -> str:
        try:
            return VECTOR_TYPE_NAMES[t.name]
        except KeyError:
            raise CodegenError(f"cuda: vector type {t.name} is not supported; use one of "
                               f"{', '.join(VECTOR_TYPE_NAMES)}") from None

    # ------------------------------------------------- float16 / bfloat16 values
    HALF_TO_FLOAT = {dtypes.float16: "__half2float({0})", dtypes.bfloat16: "__bfloat162float({0})"}
    FLOAT_TO_HALF = {dtypes.float16: "__float2half_rn({0})", dtypes.bfloat16: "__float2bfloat16_rn({0})"}

    def cast_value(self, e: Expr, t: Any) -> tuple[str, int]:
        if isinstance(t, DataType) and t.lanes > 1:
            if infer_type(e) is t:
                return self.visit_expr(e)
            raise CodegenError(f"cuda: conversion to vector type {t} is not supported ({e})")
        return super().cast_value(e, t)

    def min_max(self, op: str, t: DataType, a: str, b: str) -> str:
        if t.lanes > 1:
            raise CodegenError(f"cuda: {op} of vector type {t} is not supported")
        compute = "float" if t in _HALF_TYPES else self.type_name(t)
        return f"hidet_{op}<{compute}>({a}, {b})"

    def assert_failure(self, message: str) -> list[str]:
        return [f'printf("%s\\n", {message});', "__trap();"]


# ---------------------------------------------------------------------- kernel specs
def block_threads(fn: Function) -> int:
    block = _dims(fn, "block_dim")
    if not all(isinstance(d, int) for d in block):
        raise CodegenError(f"cuda: kernel {fn.name!r} needs a constant block_dim, got {fn.attrs.get('block_dim')}")
    threads = 1
    for d in block:
        threads *= d
    if not 1 <= threads <= _MAX_BLOCK_THREADS:
        raise CodegenError(f"cuda: kernel {fn.name!r} has {threads} threads per block; 1 to 1024 allowed")
    return threads


def _dims(fn: Function, key: str) -> tuple:
    value = fn.attrs.get(key)
    if value is None:
        raise CodegenError(f"cuda: kernel {fn.name!r} has no attrs[{key!r}] (set attrs.cuda.{key})")
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    return tuple(int(d.value) if isinstance(d, Constant) else d for d in items)


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


_PY_OPS = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "div": "_c_div({}, {})",
           "mod": "_c_mod({}, {})", "min": "min({}, {})", "max": "max({}, {})", "lt": "({} < {})",
           "le": "({} <= {})", "eq": "({} == {})", "ne": "({} != {})", "and": "({} and {})", "or": "({} or {})",
           "shl": "({} << {})", "shr": "({} >> {})"}


def _python_source(e: Expr, index: dict) -> str:
    """A Python expression over ``args`` computing `e` (integer launch arithmetic);
    raises KeyError/TypeError for forms it does not translate."""
    if isinstance(e, Constant):
        return repr(int(e.value)) if not isinstance(e.value, float) else repr(e.value)
    if isinstance(e, Var):
        return f"int(args[{index[e]}])"
    if isinstance(e, BinaryOp):
        if e.op == "div" and infer_type(e).is_float():
            raise TypeError("float division in a launch expression")
        return _PY_OPS[e.op].format(_python_source(e.a, index), _python_source(e.b, index))
    if isinstance(e, Cast) and isinstance(e.dtype, DataType) and e.dtype.is_integer():
        return f"int({_python_source(e.expr, index)})"
    if isinstance(e, IfThenElse):
        return (f"({_python_source(e.then_expr, index)} if {_python_source(e.cond, index)} "
                f"else {_python_source(e.else_expr, index)})")
    raise TypeError(f"no Python form for {type(e).__name__}")


def launch_function(exprs: Sequence[Any], params: Sequence[Var]) -> Callable[[Sequence[Any]], tuple]:
    """``f(args) -> tuple of ints``: `exprs` (ints or IR expressions over the scalar
    `params`) evaluated from the launch arguments. Compiled to one Python lambda when
    every form translates; otherwise evaluated with the IR evaluator each launch."""
    index = {p: k for k, p in enumerate(params)}
    exprs = [int(x) if isinstance(x, int) else x for x in exprs]
    try:
        parts = [repr(x) if isinstance(x, int) else _python_source(x, index) for x in exprs]
        code = compile(f"lambda args: ({', '.join(parts)},)", "<hidet launch dims>", "eval")
        return eval(code, {"_c_div": _c_div, "_c_mod": _c_mod, "min": min, "max": max, "int": int})
    except (KeyError, TypeError):
        from hidet_framework.analysis.evaluator import evaluate_expr

        def evaluate(args: Sequence[Any]) -> tuple:
            env = {p: a for p, a in zip(params, args) if isinstance(p.type, DataType)}
            return tuple(x if isinstance(x, int) else int(evaluate_expr(x, env)) for x in exprs)
        return evaluate


def _kernel_spec(fn: Function) -> KernelSpec:
    params = [ParamSpec(p.hint, *param_fields(p, f"cuda: kernel {fn.name!r}")) for p in fn.params]
    for index, swizzle, box in _tensor_maps(fn):
        source = params[index]
        params.append(ParamSpec(f"{_hopper.TENSOR_MAP_PREFIX}{source.name}", "tensormap", source.dtype, source.shape,
                                tensor_map=(index, swizzle, box)))
    grid = _dims(fn, "grid_dim")
    block = _dims(fn, "block_dim")
    block_threads(fn)
    for d in grid:
        if not isinstance(d, int):
            for v in _free_vars(d):
                if v not in fn.params or not isinstance(v.type, DataType):
                    raise CodegenError(f"cuda: kernel {fn.name!r}: grid_dim uses {v.hint!r}, which is not a "
                                       f"scalar parameter")
    grid_spec: Any = grid if all(isinstance(d, int) for d in grid) else launch_function(grid, fn.params)
    smem = fn.attrs.get("dynamic_smem_bytes", 0)
    if isinstance(smem, Constant):
        smem = int(smem.value)
    if not isinstance(smem, int):
        first = launch_function([smem], fn.params)
        smem_spec: Any = lambda args: first(args)[0]  # noqa: E731
    else:
        smem_spec = smem
    return KernelSpec(c_identifier(fn.name), params, grid_spec, block, smem_spec)


def _free_vars(e: Expr) -> list[Var]:
    from hidet_framework.ir.functors import collect

    return collect(e, Var)


def generate(module: IRModule, target: Any = None) -> str:
    """CUDA C source of a lowered IR module."""
    return CudaCodegen(target).generate(module)


def kernel_specs(module: IRModule) -> list[KernelSpec]:
    """How to launch each ``cuda_kernel`` of `module` (named by its C symbol)."""
    return [_kernel_spec(fn) for fn in module.functions.values() if fn.kind == "cuda_kernel"]
