"""The C code generator's text: a golden function, hostile names, literals, precedence,
and clear errors (no compiler needed except where a test builds)."""
from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

from hidet_framework.backend.c_style import CodegenError, c_string_literal, comment_text
from hidet_framework.ir import (
    AsmStmt, AssignStmt, BufferStoreStmt, Call, DeclareStmt, ForMappingStmt, ForStmt, Function, IfStmt,
    LetStmt, ReturnStmt, Scope, TensorSlice, WhileStmt, BreakStmt, cast, const, equal, if_then_else, logical_and,
    logical_or, maximum, module, seq, tensor_type, var,
)
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import BinaryOp, UnaryOp
from hidet_plugin_cpu.codegen import CCodegen, generate, signatures


def function_text(source: str, name: str) -> str:
    start = source.index(f"/* hidet function: {name} */")
    end = source.find("\n/* hidet function:", start + 1)
    return source[start:end if end >= 0 else len(source)].strip() + "\n"


def test_golden_scale_kernel():
    n = var("n")
    x, y = var("x", tensor_type("float32", [n])), var("y", tensor_type("float32", [n]))
    i, t = var("i"), var("t", "float32")
    body = ForStmt(i, n, IfStmt(equal(i % 2, 0), LetStmt(t, x[i] * 0.5, BufferStoreStmt(y, [i], t - 1.0)),
                                BufferStoreStmt(y, [i], -x[i])), parallel=True)
    source = generate(module("golden", [Function("scale", [x, y, n], body, kind="cpu_kernel")]))
    assert function_text(source, "scale") == textwrap.dedent("""\
        /* hidet function: scale */
        HIDET_EXPORT void scale(float* __restrict__ x, float* __restrict__ y, int32_t n) {
            {
                struct scale_par0_ctx hidet_ctx = {x, y};
                hidet_parallel_for(scale_par0_task, &hidet_ctx, (int64_t)(n), 32768);
            }
        }
        """)
    # the loop itself: outlined over an iteration range, the parameters still restrict
    assert function_text(source, "scale (parallel loop 0)") == textwrap.dedent("""\
        /* hidet function: scale (parallel loop 0) */
        struct scale_par0_ctx {
            float* x;
            float* y;
        };
        static __attribute__((noinline)) void scale_par0(float* __restrict__ x, float* __restrict__ y, int64_t hidet_begin, int64_t hidet_end) {
            for (int32_t i = (int32_t)hidet_begin; i < (int32_t)hidet_end; ++i) {
                if (i % 2 == 0) {
                    {
                        const float t = x[i] * 0.5f;
                        y[i] = t - 1.0f;
                    }
                } else {
                    y[i] = -x[i];
                }
            }
        }
        static void scale_par0_task(void* c, int64_t b, int64_t e) {
            struct scale_par0_ctx* k = (struct scale_par0_ctx*)c;
            scale_par0(k->x, k->y, b, e);
        }
        """)
    assert "HIDET_EXPORT void scale(float* __restrict__ x, float* __restrict__ y, int32_t n);" in source


HOSTILE = ['a"b', "line\nbreak", "*/ int evil; /*", "#include <stdio.h>", "naïve_变量", "int", "return",
           "", "1st", "__reserved", "x; system(\"rm -rf /\");", "\\", "??/", "omp_get_thread_num", "hidet_assert_fail"]


@pytest.mark.parametrize("fname", ['k"*/\n#include <x>', "kernel ünïcode", "while"])
def test_hostile_names_never_reach_the_source(cpu_backend, rng, fname):
    n = 11
    params = [var(h, tensor_type("float32", [n])) for h in HOSTILE[:3]]
    scalars = [var(h, "float32") for h in HOSTILE[3:8]]
    locals_ = [var(h, "float32") for h in HOSTILE[8:]]
    i = var('i"\n')
    acc = scalars[0]
    for v in scalars[1:]:
        acc = acc + v
    stmts = [DeclareStmt(v, const(1.0)) for v in locals_]
    total = locals_[0]
    for v in locals_[1:]:
        total = total + v
    body = ForStmt(i, n, seq(*stmts, BufferStoreStmt(params[2], [i], params[0][i] + params[1][i] + acc + total)))
    helper_x = var("*/", "float32")
    helper = Function(fname + " helper", [helper_x], ReturnStmt(helper_x), kind="device", ret_type=dtypes.float32)
    main = Function(fname, [*params, *scalars], seq(body, BufferStoreStmt(
        params[2], [0], Call(helper.name, (params[2][0],), dtypes.float32))))
    m = module('mod "*/', [main, helper])
    source = generate(m)
    code = re.sub(r"/\*.*?\*/", "", source, flags=re.S)  # outside comments
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', 'STR', code)  # and string literals
    assert not any(ord(c) > 127 for c in source)
    for bad in ['"', "#include <x>", "int evil", "system(", "\\", "??/"]:
        assert bad not in code, bad
    for line in code.splitlines():
        assert not line.strip().startswith("#") or re.match(r"#(include <\w+\.h>|define HIDET_EXPORT|pragma)",
                                                            line.strip()), line
    # every comment is one of ours and closes where it should
    assert source.count("/*") == source.count("*/")
    lib = cpu_backend.load(cpu_backend.build(source, cpu_backend.detect_target()), m)
    a, b, out = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32), np.full(n, np.nan, np.float32)
    s = rng.standard_normal(5)
    lib[fname](a, b, out, *map(float, s))
    want = a.astype(np.float64) + b + np.float32(s).astype(np.float64).sum() + len(locals_)
    assert np.allclose(out, want, rtol=1e-5, atol=1e-5)
    assert list(signatures(m)) == [fname]


def test_comment_and_string_escaping():
    assert comment_text("a */ b /* c\n") == "a *\\/ b /\\* c\\u000a"
    assert c_string_literal('say "hi"?\n\\') == '"say \\042hi\\042\\077\\012\\134"'
    assert c_string_literal("é") == '"\\303\\251"'


def _expr_text(e) -> str:
    gen = CCodegen()
    gen.function, gen.module, gen.func_names = None, module("m", []), {}
    for v in set(_vars(e)):
        gen.names[v] = gen.scope.unique(v.hint)
    return gen.expr(e)


def _vars(e):
    from hidet_framework.ir import Var, collect

    return collect(e, Var)


def test_minimal_parentheses():
    a, b, c = var("a"), var("b"), var("c")
    assert _expr_text((a + b) * c) == "(a + b) * c"
    assert _expr_text(a + b * c) == "a + b * c"
    assert _expr_text(a - (b - c)) == "a - (b - c)"
    assert _expr_text((a - b) - c) == "a - b - c"
    assert _expr_text(-(-a)) == "-(-a)"
    assert _expr_text(a - const(-3)) == "a - -3"
    assert _expr_text(logical_or(a < b, logical_and(b < c, a < c))) == "a < b || (b < c && a < c)"
    assert _expr_text(equal(a & b, c)) == "(a & b) == c"
    assert _expr_text(BinaryOp("bit_and", a, BinaryOp("eq", b, c))) == "a & (b == c)"
    assert _expr_text(if_then_else(a < b, a, if_then_else(b < c, b, c))) == "a < b ? a : b < c ? b : c"
    assert _expr_text(cast(a + b, "float32") * 2.0) == "(float)(a + b) * 2.0f"
    assert _expr_text(maximum(a, b + c)) == "hidet_max_int32(a, b + c)"
    assert _expr_text(UnaryOp("not", a < b)) == "!(a < b)"
    i8 = var("x", "int8")
    assert _expr_text(i8 + i8) == "(int8_t)(x + x)"


@pytest.mark.parametrize("value,dtype,text", [
    (0.1, "float32", "0.1f"), (1.0, "float32", "1.0f"), (-0.0, "float32", "-0.0f"),
    (3.4028234663852886e38, "float32", "3.4028235e+38f"), (1e-45, "float32", "1.4013e-45f"),
    (0.1, "float64", "0.1"), (1 / 3, "float64", "0.3333333333333333"), (2.0 ** -1074, "float64", "5e-324"),
    (float("inf"), "float32", "INFINITY"), (float("-inf"), "float32", "-INFINITY"),
    (float("nan"), "float32", "NAN"), (float("inf"), "float64", "(double)INFINITY"),
    (0.1, "float16", "0.099975586f"), (-2147483648, "int32", "(-2147483647 - 1)"),
    (-(2 ** 63), "int64", "(-9223372036854775807LL - 1)"), (7, "int64", "7LL"), (7, "uint32", "7U"),
    (7, "int8", "(int8_t)7"), (True, "bool", "true"),
])
def test_exact_literals(value, dtype, text):
    assert _expr_text(const(value, dtype)) == text


def test_float32_literals_round_trip():
    rng = np.random.default_rng()
    gen = CCodegen()
    for v in (rng.standard_normal(200) * 10.0 ** rng.integers(-40, 38, 200)).astype(np.float32):
        text, _ = gen.float_literal(float(v), dtypes.float32)
        assert np.float32(text.rstrip("f")) == v


def _function(body, params=()):
    return module("m", [Function("f", list(params), body)])


def test_errors_are_clear():
    i, x = var("i"), var("x", tensor_type("float32", [4]))
    with pytest.raises(CodegenError, match="lower_task_mapping"):
        generate(_function(ForMappingStmt((i,), None, const(0), BufferStoreStmt(x, [0], 1.0)), [x]))
    with pytest.raises(CodegenError, match="TensorSlice"):
        generate(_function(DeclareStmt(var("p", tensor_type("float32", [2])), TensorSlice(x, (None,), (0,), (2,))), [x]))
    with pytest.raises(CodegenError, match="unknown function 'nope'"):
        generate(_function(BufferStoreStmt(x, [0], Call("nope", (), dtypes.float32)), [x]))
    with pytest.raises(CodegenError, match="never declared"):
        generate(_function(BufferStoreStmt(x, [0], var("ghost", "float32")), [x]))
    with pytest.raises(CodegenError, match="shared scope"):
        generate(_function(DeclareStmt(var("s", tensor_type("float32", [4])), scope=Scope.SHARED)))
    with pytest.raises(CodegenError, match="CUDA kernel"):
        generate(module("m", [Function("k", [], seq(), kind="cuda_kernel")]))
    from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive

    register_primitive(PrimitiveFunction("test_cuda_only_prim", dtypes.int32, {"cuda": "threadIdx.x"}))
    with pytest.raises(CodegenError, match="no 'cpu' implementation"):
        generate(_function(BufferStoreStmt(x, [0], cast(Call("test_cuda_only_prim", ()), "float32")), [x]))


def test_entry_symbol_collision_is_an_error():
    with pytest.raises(CodegenError, match="taken"):
        generate(module("m", [Function("a b", [], seq()), Function("a_b_x", [], seq(), kind="device"),
                              Function("hidet_assert_fail", [], seq())]))


def test_while_break_asm_and_assign_print():
    i = var("i")
    body = seq(DeclareStmt(i, const(0)), WhileStmt(const(True), seq(
        AssignStmt(i, i + 1), IfStmt(i < 10, None, BreakStmt()) if False else IfStmt(i >= 10, BreakStmt()))),
        AsmStmt("mov %1, %0", outputs=(("=r", i),), inputs=(("r", i + 1),), clobbers=("memory",)))
    text = generate(_function(body))
    assert "while (true) {" in text and "break;" in text
    assert '__asm__ __volatile__("mov %1, %0" : "=r"(i) : "r"(i + 1) : "memory");' in text


@pytest.mark.parametrize("extent, pragma", [(8, "#pragma GCC unroll 8"), (64, "#pragma GCC unroll 64"), (2048, None)])
def test_full_unroll_hints_only_for_short_loops(extent, pragma):
    """A full-unroll hint on a long loop only costs compile time (gcc took minutes on
    a 2048-step loop): it is passed on up to 64 iterations."""
    out = var("out", tensor_type("float32", [extent]))
    i = var("i")
    source = generate(_function(ForStmt(i, extent, BufferStoreStmt(out, [i], 1.0), unroll=True), [out]), None)
    if pragma:
        assert pragma in source
    else:
        assert "#pragma GCC unroll" not in source
