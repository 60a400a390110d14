"""The IR's ``max(a, b)`` / ``min(a, b)`` are numpy's ``maximum`` / ``minimum`` (session
14): a NaN operand is the result, whichever side it is on; of two NaNs and of a tie
(-0.0 with 0.0) the result is `b`, as numpy's float32 and float64 loops (np.maximum(-0.0,
0.0) is 0.0, np.maximum(0.0, -0.0) is -0.0; numpy's float16 loop and onnxruntime's Max give
`a` on that tie; the half types here compute in float32, so give `b`). Checked on every
ordered pair of special values (NaN, +-inf, +-0, numbers) in bits of sign and value:

- `maximum` / `minimum` through hf.compile on the CPU (this machine's ISA and forced
  AVX2), the GPU with ``-m cuda`` (op_target), and the evaluator; float32, float64,
  float16 and bfloat16 (computed in float32, so a NaN's payload is not compared);
- the C helpers the CPU codegen prints (`hidet_max_float32`...) and the CUDA preamble's
  ``hidet_min`` / ``hidet_max`` templates, compiled as they are printed by the host C/C++
  compiler and run here (the CUDA text is the one NVRTC compiles; only the function
  qualifiers are dropped), on floats, doubles and integers;
- the evaluator's `_min` / `_max`, which constant folding uses.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import symbol

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5, 1e-30]


def _pairs(dtype):
    a, b = np.meshgrid(np.array(SPECIALS), np.array(SPECIALS), indexing="ij")
    return a.reshape(-1).astype(dtype), b.reshape(-1).astype(dtype)


def _same(got, want, what):
    """Same values, NaN where numpy has NaN, same sign bit (the -0.0 / 0.0 tie)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    np.testing.assert_array_equal(got, want, err_msg=what)
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]), err_msg=what)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_every_pair_of_special_values(runner, op_target, kind, dtype):
    a, b = _pairs("float32" if dtype == "bfloat16" else dtype)
    feed_a, feed_b = (_to_bfloat16(a), _to_bfloat16(b)) if dtype == "bfloat16" else (a, b)
    # the values the type holds, compared as float32 (the half types compute in float32): numpy's
    # float16 loop gives `a` on a -0.0 / 0.0 tie, its float32 and float64 ones `b`; we give `b`
    a, b = _as_float(feed_a, dtype), _as_float(feed_b, dtype)
    xa, xb = symbol(a.shape, dtype), symbol(b.shape, dtype)
    op, ref = (ops.maximum, np.maximum) if kind == "max" else (ops.minimum, np.minimum)
    want = ref(a.astype(np.float64), b.astype(np.float64))
    assert np.isnan(want).sum() == 2 * len(SPECIALS) - 1
    feed = {xa: feed_a, xb: feed_b}
    (got,) = runner.run(op(xa, xb), feed)
    _same(_as_float(got, dtype), want, f"{kind} {dtype} {op_target}")
    if op_target == "cpu" and dtype != "bfloat16":   # the evaluator reads a uint16 feed as numbers
        (ev,) = runner.run_with_evaluator(op(xa, xb), feed)
        _same(_as_float(ev, dtype), want, f"{kind} {dtype} evaluator")


def _to_bfloat16(a32):
    from hidet_framework.ir.dtypes import data_type

    bits = (a32.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)   # truncated: NaN stays NaN
    return bits.view(np.dtype(data_type("bfloat16").numpy_name))


def _as_float(got, dtype):
    if dtype == "bfloat16":
        return (np.asarray(got).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(got)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_forced_avx2_and_a_constant_operand(runner, op_target, kind, monkeypatch, rng, tmp_path):
    """gcc told -mno-avx512f (256-bit vectors, vblendvps), on a long run with a
    remainder, and a constant on either side of the NaN."""
    if op_target != "cpu":
        pytest.skip("the CPU's ISA")
    from hidet_framework.driver.task_compiler import clear_task_cache
    from hidet_plugin_cpu import build

    monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))     # builds of -mno-avx512f apart
    clear_task_cache()
    a = rng.uniform(-3, 3, 1031).astype(np.float32)
    b = rng.uniform(-3, 3, 1031).astype(np.float32)
    a[rng.random(1031) < 0.1], b[rng.random(1031) < 0.1] = np.nan, np.nan
    a[:len(SPECIALS)], b[-len(SPECIALS):] = SPECIALS, SPECIALS
    xa, xb = symbol(a.shape, "float32"), symbol(b.shape, "float32")
    op, ref = (ops.maximum, np.maximum) if kind == "max" else (ops.minimum, np.minimum)
    got = runner.run([op(xa, xb), op(xa, 0.0), op(-1.0, xb)], {xa: a, xb: b})
    for g, w, what in zip(got, (ref(a, b), ref(a, np.float32(0.0)), ref(np.float32(-1.0), b)), "xy xc cy"):
        _same(g, w, f"{kind} avx2 {what}")
    clear_task_cache()


_C_MAIN = r"""
#include <stdio.h>
#include <stdint.h>
#include <math.h>
%(helpers)s
int main(void) {
    double v[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 2.5, -2.5, 1e-30};
    int n = sizeof v / sizeof v[0];
    for (int i = 0; i < n; ++i) for (int j = 0; j < n; ++j) {
        printf("%%.17g %%.17g %%.17g %%.17g %%lld %%lld\n",
               (double)%(min)s((float)v[i], (float)v[j]), (double)%(max)s((float)v[i], (float)v[j]),
               %(dmin)s(v[i], v[j]), %(dmax)s(v[i], v[j]),
               (long long)%(imin)s((int32_t)(7 * i - 20), (int32_t)(5 * j - 17)),
               (long long)%(imax)s((int32_t)(7 * i - 20), (int32_t)(5 * j - 17)));
    }
    return 0;
}
"""


def _run_c(tmp_path, compiler, suffix, source):
    src, exe = tmp_path / f"t.{suffix}", tmp_path / f"t_{suffix}"
    src.write_text(source)
    flags = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math"]
    subprocess.run([compiler, *flags, str(src), "-o", str(exe)], check=True, capture_output=True)
    rows = [line.split() for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                     text=True).stdout.splitlines()]
    return np.array([[float(x) for x in r] for r in rows])


def _check_table(table, what):
    a, b = _pairs(np.float64)
    fa, fb = _pairs(np.float32)
    ia, ib = np.repeat(7 * np.arange(8) - 20, 8), np.tile(5 * np.arange(8) - 17, 8)
    for col, want in enumerate((np.minimum(fa, fb), np.maximum(fa, fb), np.minimum(a, b), np.maximum(a, b),
                                np.minimum(ia, ib), np.maximum(ia, ib))):
        _same(table[:, col], want, f"{what} column {col}")


def test_cpu_helpers_as_printed(tmp_path):
    from hidet_framework.ir.func import module
    from hidet_plugin_cpu.codegen import CCodegen

    helpers = "\n".join(line for line in CCodegen().preamble(module("m", [])) if line.startswith("static inline")
                        and ("hidet_min_" in line or "hidet_max_" in line))
    assert "hidet_max_float32" in helpers and "hidet_min_int32" in helpers
    source = _C_MAIN % {"helpers": helpers, "min": "hidet_min_float32", "max": "hidet_max_float32",
                        "dmin": "hidet_min_float64", "dmax": "hidet_max_float64",
                        "imin": "hidet_min_int32", "imax": "hidet_max_int32"}
    _check_table(_run_c(tmp_path, "gcc", "c", source), "C helpers")


_CONST_MAIN = r"""
#include <stdio.h>
#include <math.h>
%(helpers)s
int main(void) {
    double v[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 2.5, -2.5, 1e-30};
    int n = sizeof v / sizeof v[0];
    for (int i = 0; i < n; ++i) for (int j = 1; j < n; ++j)      /* b: every special but NaN */
        printf("%%.17g %%.17g %%.17g %%.17g\n",
               (double)hidet_min_const_float32((float)v[i], (float)v[j]),
               (double)hidet_max_const_float32((float)v[i], (float)v[j]),
               hidet_min_const_float64(v[i], v[j]), hidet_max_const_float64(v[i], v[j]));
    return 0;
}
"""


def test_cpu_constant_operand_helpers_as_printed(tmp_path):
    """`hidet_min_const_*` / `hidet_max_const_*` (printed where `b` is a constant that is
    not NaN) give numpy's answer on every pair whose `b` is not NaN."""
    from hidet_framework.ir.func import module
    from hidet_plugin_cpu.codegen import CCodegen

    helpers = "\n".join(line for line in CCodegen().preamble(module("m", [])) if line.startswith("static inline")
                        and "_const_" in line)
    table = _run_c(tmp_path, "gcc", "c", _CONST_MAIN % {"helpers": helpers})
    a, b = (x.reshape(8, 8)[:, 1:].reshape(-1) for x in _pairs(np.float64))
    fa, fb = (x.reshape(8, 8)[:, 1:].reshape(-1) for x in _pairs(np.float32))
    for col, want in enumerate((np.minimum(fa, fb), np.maximum(fa, fb), np.minimum(a, b), np.maximum(a, b))):
        _same(table[:, col], want, f"constant-operand helpers column {col}")


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_every_special_as_the_constant_operand(runner, isa, monkeypatch, rng, tmp_path):
    """`max(x, c)` / `min(x, c)` through hf.compile with each special value as the
    constant `c` (NaN included: it must not take the constant path), `x` a long run of
    specials, NaNs and numbers; the same with `c` on the left."""
    from hidet_framework.driver.task_compiler import clear_task_cache
    from hidet_plugin_cpu import build

    if isa == "avx2":
        monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    clear_task_cache()
    x = rng.uniform(-3, 3, 257).astype(np.float32)
    x[rng.random(257) < 0.1] = np.nan
    x[:len(SPECIALS)] = SPECIALS
    x[-len(SPECIALS):] = SPECIALS[::-1]
    xs = symbol(x.shape, "float32")
    outs, wants = [], []
    for c in SPECIALS:
        for op, ref in ((ops.maximum, np.maximum), (ops.minimum, np.minimum)):
            outs += [op(xs, c), op(c, xs)]
            wants += [ref(x, np.float32(c)), ref(np.float32(c), x)]
    for i, (g, w) in enumerate(zip(runner.run(outs, {xs: x}), wants)):
        _same(g, w, f"{isa} output {i} (constant {SPECIALS[i // 4]})")
    clear_task_cache()


def test_constant_operand_prints_the_one_compare_helper():
    """Which helper the codegen prints: the constant one only for a float constant `b`
    that is not NaN (relu, clip); NaN constants, constant `a`, integers and variables
    keep the general helpers."""
    from hidet_framework.ir.expr import const, maximum, minimum, var
    from hidet_framework.ir.func import module
    from hidet_plugin_cpu.codegen import CCodegen

    x, i = var("x", "float32"), var("i", "int32")
    gen = CCodegen()
    gen.function, gen.module, gen.func_names = None, module("m", []), {}
    gen.names[x], gen.names[i] = "x", "i"
    assert gen.expr(maximum(x, const(0.0, "float32"))) == "hidet_max_const_float32(x, 0.0f)"
    assert gen.expr(minimum(x, const(6.0, "float32"))) == "hidet_min_const_float32(x, 6.0f)"
    assert gen.expr(maximum(x, const(float("nan"), "float32"))).startswith("hidet_max_float32(x, ")
    assert gen.expr(maximum(const(0.0, "float32"), x)).startswith("hidet_max_float32(")
    assert gen.expr(maximum(x, x)) == "hidet_max_float32(x, x)"
    assert gen.expr(minimum(i, const(3, "int32"))) == "hidet_min_int32(i, 3)"


def test_cuda_preamble_templates_on_the_host(tmp_path):
    from hidet_plugin_cuda import codegen

    helpers = [line for line in codegen._PREAMBLE.splitlines() if line.startswith("template <typename T>")
               and ("hidet_min(" in line or "hidet_max(" in line)]
    assert len(helpers) == 2
    host = "\n".join(line.replace("__device__ __forceinline__", "static inline") for line in helpers)
    source = _C_MAIN % {"helpers": host, "min": "hidet_min<float>", "max": "hidet_max<float>",
                        "dmin": "hidet_min<double>", "dmax": "hidet_max<double>",
                        "imin": "hidet_min<int32_t>", "imax": "hidet_max<int32_t>"}
    _check_table(_run_c(tmp_path, "g++", "cpp", source), "CUDA templates")


def test_the_evaluator_folds_as_numpy():
    from hidet_framework.analysis.evaluator_values import _max, _min

    a, b = _pairs(np.float64)
    _same([_max(x, y) for x, y in zip(a, b)], np.maximum(a, b), "evaluator max")
    _same([_min(x, y) for x, y in zip(a, b)], np.minimum(a, b), "evaluator min")
    assert _max(3, 5) == 5 and _min(3, 5) == 3 and _max(-2, -7) == -2


_ROW_MAIN = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
%(row_max)s
int main(void) {
    float p[128];
    for (int n = 8; n <= 128; n *= 2)
        for (int at = -1; at < n; ++at) {                 /* -1: no NaN */
            for (int i = 0; i < n; ++i) p[i] = (float)((i * 37) %% 101) - 50.0f;
            if (at >= 0) p[at] = NAN;
            printf("%%d %%d %%.9g\n", n, at, (double)hidet_row_max_f32(p, n));
        }
    return 0;
}
"""


@pytest.mark.parametrize("isa", ["native", "-mno-avx512f", "-mno-avx"])
def test_row_max_keeps_a_nan(tmp_path, isa):
    """row_math's hidet_row_max_f32 (the softmax's and attention's lane reduction) on
    every ISA branch of it: NaN at every position of n = 8..128 lanes is the result."""
    from hidet_plugin_cpu.row_math import ROW_FUNCTIONS

    src, exe = tmp_path / "row.c", tmp_path / "row"
    src.write_text(_ROW_MAIN % {"row_max": ROW_FUNCTIONS["hidet_row_max_f32"]})
    flags = ["-O3", "-march=native", "-std=c11", "-fno-math-errno", "-fno-trapping-math"]
    subprocess.run(["gcc", *flags, *([] if isa == "native" else [isa]), str(src), "-o", str(exe)], check=True,
                   capture_output=True)
    rows = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    for line in filter(None, rows):
        n, at, got = line.split()
        p = np.array([(i * 37) % 101 - 50.0 for i in range(int(n))], np.float32)
        if int(at) >= 0:
            p[int(at)] = np.nan
        want = np.max(p)
        assert (np.isnan(want) and np.isnan(float(got))) or float(got) == want, (isa, n, at, got)
