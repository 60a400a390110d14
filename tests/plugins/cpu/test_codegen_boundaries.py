"""The C printer's smaller decisions, read from the generated text (no compiler): loop
pragmas at their limits, qualifiers per function kind, scopes the cpu target refuses,
vector casts and pointers, min/max helpers per type, the preamble, reserved names,
escaping in string literals, and the excerpt a compile error shows. Written to kill
mutants of the cpu plugin's codegen.py and backend/c_style*.py (issue 12)."""
from __future__ import annotations

import pytest

from hidet_framework.backend.c_style import CodegenError, c_string_literal, function_at, source_excerpt
from hidet_framework.ir import (
    BufferStoreStmt, ContinueStmt, DeclareStmt, ForStmt, Function, IfStmt, Scope, cast, const, maximum,
    minimum, module, tensor_type, var,
)
from hidet_framework.ir import dtypes
from hidet_framework.ir.types import PointerType
from hidet_plugin_cpu.codegen import CCodegen, generate, public_signatures, signatures


def _source(body, params=(), kind="cpu_kernel", name="f", extra=()):
    return generate(module("m", [*extra, Function(name, list(params), body, kind=kind)]))


def _loop(extent, **hints):
    i = var("i")
    y = var("y", tensor_type("int32", [64]))
    return y, ForStmt(i, extent, BufferStoreStmt(y, [i], i), **hints)


@pytest.mark.parametrize("extent, hints, pragma", [
    (const(8), {"parallel": True}, None),                       # too little work to share: serial
    (const(2), {"parallel": True}, None),                       # (parallel.py, SERIAL_WORK)
    (const(1), {"parallel": True}, None),                       # one iteration: no thread team
    (const(0), {"parallel": True}, None),
    (const(16), {"unroll": True}, "#pragma GCC unroll 16"),
    (const(1), {"unroll": True}, "#pragma GCC unroll 1"),
    (const(0), {"unroll": True}, None),                         # nothing to unroll
    (const(4096), {"unroll": True}, None),                      # past the limit: advice ignored
    (const(64), {"unroll": 4}, "#pragma GCC unroll 4"),
    (const(64), {"unroll": 100000}, "#pragma GCC unroll 65534"),
    (const(64), {"unroll": -3}, "#pragma GCC unroll 0"),
    (const(64), {"unroll": False}, None),
    (const(64), {}, None),
])
def test_loop_pragmas(extent, hints, pragma):
    y, loop = _loop(extent, **hints)
    text = _source(loop, [y])
    text = text[text.index("/* hidet function: f */"):]  # the preamble declares simd functions
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("#pragma")]
    assert lines == ([pragma] if pragma else []), lines


def test_full_unroll_limit_is_inclusive():
    from hidet_plugin_cpu import codegen

    limit = codegen._FULL_UNROLL_LIMIT
    y, loop = _loop(const(limit), unroll=True)
    assert f"#pragma GCC unroll {limit}" in _source(loop, [y])
    y, loop = _loop(const(limit + 1), unroll=True)
    assert "#pragma GCC unroll" not in _source(loop, [y])


def test_qualifiers_by_kind():
    n = var("n")
    helper = Function("helper", [n], None, kind="device")
    text = _source(None, [n], extra=[helper])
    assert "static inline void helper(int32_t n)" in text and "HIDET_EXPORT void f(int32_t n)" in text
    pub = _source(None, [n], kind="public")
    assert "HIDET_EXPORT void f(int32_t n)" in pub
    with pytest.raises(CodegenError, match="'f' is a CUDA kernel; the cpu target cannot print it"):
        _source(None, [n], kind="cuda_kernel")


def test_entry_kinds_are_exported_with_signatures():
    n = var("n")
    m = module("m", [Function("a", [n], None, kind="public"), Function("b", [n], None, kind="cpu_kernel"),
                     Function("c", [n], None, kind="device")])
    assert sorted(signatures(m)) == ["a", "b"]
    assert [s.name for s in public_signatures(m)] == ["a", "b"]


def test_scopes_the_cpu_refuses():
    for scope in (Scope.SHARED,):
        t = var("t", tensor_type("float32", [4]))
        with pytest.raises(CodegenError, match=f"cpu: cannot declare a variable in {scope.value} scope"):
            _source(DeclareStmt(t, None, scope))
    r = var("r", tensor_type("float32", [4]))
    text = _source(DeclareStmt(r, None, Scope.REGISTER))
    assert "float r[4];" in text


def test_continue_and_min_max_helpers():
    i = var("i")
    y = var("y", tensor_type("int32", [8]))
    body = ForStmt(i, const(8), IfStmt(i < 3, ContinueStmt(), BufferStoreStmt(y, [i], minimum(i, 5))))
    text = _source(body, [y])
    assert "continue;" in text and "hidet_min_int32(i, 5)" in text
    b = var("b", "bool")
    h = var("h", "float16")
    z = var("z", tensor_type("bool", [1]))
    zh = var("zh", tensor_type("float16", [1]))
    text = _source(BufferStoreStmt(z, [0], maximum(b, b)), [z, b])
    assert "hidet_max_uint8(b, b)" in text
    text = _source(BufferStoreStmt(zh, [0], maximum(h, h)), [zh, h], kind="device")
    assert "hidet_max_float32(" in text
    v4 = var("v4", "float32x4")
    with pytest.raises(CodegenError, match="cpu: max of vector type float32x4 is not supported"):
        pv = var("p", PointerType(dtypes.data_type("float32x4")))
        _source(BufferStoreStmt(pv, [0], maximum(v4, v4)), [pv, v4], kind="device")


def test_vector_casts_and_pointers():
    x = var("x", "float32")
    p2 = var("p2", PointerType(dtypes.data_type("float32x2")))
    text = _source(BufferStoreStmt(p2, [0], cast(x, "float32x2")), [p2, x], kind="device")
    assert "(float32x2){x, x}" in text and "float32x2_u* __restrict__ p2" in text or "float32x2_u*" in text
    assert "typedef float float32x2 __attribute__((vector_size(8)));" in text
    assert "typedef float float32x2_u __attribute__((vector_size(8), aligned(4)));" in text
    i4 = var("i4", "int32x4")
    p4 = var("p4", PointerType(dtypes.data_type("float32x4")))
    text = _source(BufferStoreStmt(p4, [0], cast(i4, "float32x4")), [p4, i4], kind="device")
    assert "__builtin_convertvector(i4, float32x4)" in text
    with pytest.raises(CodegenError, match="broadcast to float32x4 needs a variable or constant operand"):
        _source(BufferStoreStmt(p4, [0], cast(x + 1.0, "float32x4")), [p4, x], kind="device")
    with pytest.raises(CodegenError, match="vector type boolx4 is not supported"):
        _source(None, [var("q", PointerType(dtypes.data_type("boolx4")))], kind="device")


def test_preamble_and_reserved_names():
    text = _source(None, [var("n")])
    for h in ("stdint.h", "stdbool.h", "math.h", "omp.h", "stdio.h", "stdlib.h", "string.h"):
        assert f"#include <{h}>" in text
    reserved = CCodegen().reserved_names()
    for name in ("HIDET_EXPORT", "hidet_bf16_to_f32", "hidet_f32_to_bf16", "hidet_f16_from_bits", "hidet_assert_fail",
                 "omp_get_thread_num", "omp_get_num_threads", "INFINITY", "NAN", "hidet_min_int32",
                 "hidet_max_float32", "float32x4", "float32x4_u", "int8x16"):
        assert name in reserved, name
    clash, y = var("hidet_min_int32"), var("y", tensor_type("int32", [1]))
    text = _source(BufferStoreStmt(y, [0], clash), [y, clash])
    fn = text[text.index("/* hidet function: f */"):]
    assert "int32_t hidet_min_int32_1" in fn and "int32_t hidet_min_int32," not in fn  # never shadows a helper


def test_string_literals_escape_what_c_would_read_otherwise():
    assert c_string_literal('a"b') == '"a\\042b"' and c_string_literal("a\\b") == '"a\\134b"'
    assert c_string_literal("a?b") == '"a\\077b"' and c_string_literal("ok 1") == '"ok 1"'
    assert c_string_literal("\n") == '"\\012"' and c_string_literal("~") == '"~"' and c_string_literal("\x7f") == '"\\177"'
    assert c_string_literal(" ") == '" "' and c_string_literal("\x1f") == '"\\037"'
    assert c_string_literal("XxY") == '"XxY"'


def test_compile_error_excerpt_and_function_lookup():
    lines = ["/* hidet function: a */", "int a;", "x", "/* hidet function: b */", "y", "z", "w"]
    assert function_at(lines, 1) == "a" and function_at(lines, 3) == "a" and function_at(lines, 5) == "b"
    assert function_at(lines, 99) == "b" and function_at(["x", "y"], 2) is None and function_at(lines, 0) is None
    assert function_at(["x", "/* hidet function: z */"], 1) is None    # never wraps around to the end
    assert source_excerpt(lines, 3, 1) == "      2 | int a;\n>     3 | x\n      4 | /* hidet function: b */"
    assert source_excerpt(lines, 1, 1) == ">     1 | /* hidet function: a */\n      2 | int a;"
    assert source_excerpt(lines, 7, 2).splitlines()[-1] == ">     7 | w"


def test_the_shared_printer_defaults():
    from hidet_framework.backend.c_style import CStyleCodegen

    base = CStyleCodegen()
    assert base.entry_kinds() == ("public", "cpu_kernel", "cuda_kernel")
    n = var("n")
    assert base.function_qualifiers(Function("d", [n], None, kind="device")) == "static inline"
    assert base.function_qualifiers(Function("h", [n], None, kind="host")) == "static inline"
    assert base.function_qualifiers(Function("p", [n], None, kind="public")) == ""
    assert base.scope_prefix(Scope.LOCAL) == "" and base.scope_prefix(Scope.REGISTER) == ""
    with pytest.raises(CodegenError, match="^c: cannot declare a variable in shared scope here$"):
        base.scope_prefix(Scope.SHARED)
