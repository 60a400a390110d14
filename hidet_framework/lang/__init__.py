"""The script DSL: write kernels as Python functions, get IR functions.

    from hidet_framework.lang import script, f32, attrs, grid

    @script
    def add(a: f32[n], b: f32[n], c: f32[n]):
        attrs.func_kind = "cpu_kernel"
        for i in range(n):
            c[i] = a[i] + b[i]

See docs/dsl.md for the whole language.
"""
from hidet_framework.lang.annotations import (
    DTypeAnnotation, bf16, bfloat16, boolean, f16, f32, f64, float16, float32, float64, i8, i16, i32,
    i64, int8, int16, int32, int64, u8, u16, u32, u64, uint8, uint16, uint32, uint64,
)
from hidet_framework.lang.constructs import (
    LoopNest, TensorDecl, address_of, cast, deref, grid, local_tensor, parallel, register_tensor,
    shared_tensor, static_range, tensor_pointer, unroll,
)
from hidet_framework.lang.constructs import attrs_syntax as attrs
from hidet_framework.lang.errors import ScriptError
from hidet_framework.lang.inline_fragment import InlineFragment, inline_fragment
from hidet_framework.lang.script import ScriptFunction, script, script_module

__all__ = [
    "script", "script_module", "ScriptFunction", "ScriptError", "attrs", "grid", "parallel", "unroll",
    "static_range", "shared_tensor", "register_tensor", "local_tensor", "tensor_pointer", "cast",
    "address_of", "deref", "DTypeAnnotation", "LoopNest", "TensorDecl", "InlineFragment", "inline_fragment",
    "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "boolean",
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
]
