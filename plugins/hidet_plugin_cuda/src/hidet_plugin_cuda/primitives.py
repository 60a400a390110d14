"""Primitive functions of the ``cuda`` target: what a call prints as in CUDA C.

Three families, registered on import (``hidet_framework.ir.primitives``):

- **Worker indices**: ``threadIdx_x`` … ``gridDim_z`` (int32). The auto-scheduler
  declares ``threadIdx_x``/``blockIdx_x`` without a spelling; this gives them the cuda
  one. They print as ``(int)threadIdx.x``: CUDA's are unsigned, and ``threadIdx.x - 1``
  must be signed arithmetic like the IR's int32.
- **Math**: the CPU plugin's names (``exp_f32``, ``exp_f64``, ``fma_f32``, …) with their
  CUDA spellings. Exact by default (``expf``, not the approximate ``__expf``): a kernel
  that wants the fast path asks for ``fast_exp_f32`` explicitly.
- **Sync, warp and atomics**: ``syncthreads``, ``syncwarp``, shuffles (one primitive
  per value type: ``shfl_down_sync_f32``…), ``atomic_add_f32`` / ``atomic_add_i32``,
  ``cvta_to_shared`` (a generic pointer to a 32-bit shared-memory address, what PTX
  operands want) and ``dynamic_smem`` (the kernel's dynamic shared memory, bytes).
- **Streaming global accesses**: ``ldcs_<t>`` / ``stcs_<t>`` for ``f32``, ``f32x2``,
  ``f32x4`` print as ``__ldcs`` / ``__stcs`` (PTX ``ld.global.cs`` / ``st.global.cs``:
  cache-streaming, evict-first, for data touched once).

Tensor-core and async-copy instructions are not primitives: `hidet_plugin_cuda.lang`
builds them as ``AsmStmt`` (inline PTX) directly in the IR, so their register operands
are ordinary IR lvalues the code generator names. The generic builders (`exp`,
`shfl_down_sync`, `atomic_add`…) live in ``lang`` and pick the variant by dtype.
"""
from __future__ import annotations

from hidet_framework.ir import dtypes
from hidet_framework.ir.math_functions import register_math_spellings
from hidet_framework.ir.primitives import PrimitiveFunction
from hidet_framework.ir.primitives import register_primitive as _register_core

__all__ = ["CUDA_MATH", "SHUFFLE_TYPES", "ATOMIC_ADD_TYPES", "STREAMING_TYPES", "DYNAMIC_SMEM_NAME", "CUDA_TEMPLATES"]

KIND = "cuda"
DYNAMIC_SMEM_NAME = "hidet_dyn_smem"  # declared by the code generator's preamble

# name -> CUDA spelling of the core's math functions, `{s}` where the float32 suffix goes
CUDA_MATH = {
    "exp": "exp{s}({0})", "log": "log{s}({0})", "sqrt": "sqrt{s}({0})", "rsqrt": "rsqrt{s}({0})",
    "tanh": "tanh{s}({0})", "erf": "erf{s}({0})", "abs": "fabs{s}({0})", "floor": "floor{s}({0})",
    "ceil": "ceil{s}({0})", "sin": "sin{s}({0})", "cos": "cos{s}({0})", "pow": "pow{s}({0}, {1})",
    "min": "fmin{s}({0}, {1})", "max": "fmax{s}({0}, {1})", "fma": "fma{s}({0}, {1}, {2})",
}
# approximate float32 intrinsics, opt-in only
FAST_MATH_F32 = {"fast_exp_f32": "__expf({0})", "fast_log_f32": "__logf({0})"}

SHUFFLE_TYPES = {"f32": dtypes.float32, "i32": dtypes.int32, "u32": dtypes.uint32,
                 "f64": dtypes.float64, "i64": dtypes.int64}
ATOMIC_ADD_TYPES = {"f32": dtypes.float32, "i32": dtypes.int32, "u32": dtypes.uint32, "f64": dtypes.float64}
# element types of the streaming loads/stores (what __ldcs/__stcs take a pointer to)
STREAMING_TYPES = {"f32": dtypes.float32, "f32x2": dtypes.vector_type(dtypes.float32, 2),
                   "f32x4": dtypes.vector_type(dtypes.float32, 4)}

# Every cuda spelling registered here: the code generator reserves the identifiers
# they use (``expf``, ``__shfl_down_sync``...) so no IR variable can shadow them.
CUDA_TEMPLATES: list[str] = []


def register_primitive(prim: PrimitiveFunction) -> PrimitiveFunction:
    CUDA_TEMPLATES.append(prim.emit[KIND])
    return _register_core(prim)


def _register_indices() -> None:
    limits = {"threadIdx": (0, 1024), "blockIdx": (0, 2**31 - 1), "blockDim": (1, 1025), "gridDim": (1, 2**31)}
    for base, bounds in limits.items():
        for axis in "xyz":
            # evaluate: the IR evaluator runs one thread of one block (index 0, extent 1)
            value = 0 if base in ("threadIdx", "blockIdx") else 1
            register_primitive(PrimitiveFunction(f"{base}_{axis}", dtypes.int32, {KIND: f"(int){base}.{axis}"},
                                                 evaluate=lambda v=value: v, bounds=bounds))


def _register_math() -> None:
    CUDA_TEMPLATES.extend(register_math_spellings(KIND, CUDA_MATH))
    for name, text in FAST_MATH_F32.items():
        register_primitive(PrimitiveFunction(name, dtypes.float32, {KIND: text}))


def _register_sync_warp_atomic() -> None:
    register_primitive(PrimitiveFunction("syncthreads", None, {KIND: "__syncthreads()"}, evaluate=lambda: None))
    register_primitive(PrimitiveFunction("syncwarp", None, {KIND: "__syncwarp({0})"}, evaluate=lambda m: None))
    for short, t in SHUFFLE_TYPES.items():
        for kind in ("down", "up", "xor"):
            register_primitive(PrimitiveFunction(f"shfl_{kind}_sync_{short}", t,
                                                 {KIND: f"__shfl_{kind}_sync({{0}}, {{1}}, {{2}}, {{3}})"}))
        register_primitive(PrimitiveFunction(f"shfl_sync_{short}", t, {KIND: "__shfl_sync({0}, {1}, {2}, {3})"}))
    for short, t in ATOMIC_ADD_TYPES.items():
        # returns the old value; a statement use simply drops it
        register_primitive(PrimitiveFunction(f"atomic_add_{short}", t, {KIND: "atomicAdd({0}, {1})"}))
    register_primitive(PrimitiveFunction("float_as_uint", dtypes.uint32, {KIND: "__float_as_uint({0})"}))
    register_primitive(PrimitiveFunction("uint_as_float", dtypes.float32, {KIND: "__uint_as_float({0})"}))
    register_primitive(PrimitiveFunction("cvta_to_shared", dtypes.uint32,
                                         {KIND: "(unsigned int)__cvta_generic_to_shared({0})"}))
    # The result type is a pointer (a Call built by lang.dynamic_smem_bytes_pointer);
    # PrimitiveFunction holds scalar result types only, so none is declared here.
    register_primitive(PrimitiveFunction("dynamic_smem", None, {KIND: DYNAMIC_SMEM_NAME}))
    # the generic address of a tensor-map parameter (hopper.tensor_map_param): the code
    # generator appends `const __grid_constant__ hf_tensor_map_t hf_tmap_<param>`
    register_primitive(PrimitiveFunction("tensor_map_param", dtypes.uint64,
                                         {KIND: "(unsigned long long)&hf_tmap_{0}"}))


def _register_streaming() -> None:
    for short, t in STREAMING_TYPES.items():
        # the pointer argument prints as e.g. `(float4*)&a[i]`; __ldcs takes const T*
        register_primitive(PrimitiveFunction(f"ldcs_{short}", t, {KIND: "__ldcs({0})"}))
        register_primitive(PrimitiveFunction(f"stcs_{short}", None, {KIND: "__stcs({0}, {1})"}))


_register_indices()
_register_math()
_register_sync_warp_atomic()
_register_streaming()
