"""Compiled C computes what the IR means: integer ops (C truncating division, narrow
wrap-around) and random expression trees against the IR evaluator, math primitives
against numpy, and run-time asserts."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest

from hidet_framework.ir import (
    AssertStmt, BufferStoreStmt, ForStmt, Function, cast, const, equal, if_then_else, logical_and, logical_not,
    logical_or, maximum, minimum, module, not_equal, seq, tensor_type, var,
)
from hidet_framework.analysis.evaluator import evaluate_function
from hidet_plugin_cpu import primitives as P
from hidet_plugin_cpu.codegen import generate


def build(backend, m):
    source = generate(m, backend.detect_target())
    artifact = backend.build(source, backend.detect_target(), name=m.name)
    return backend.load(artifact, m), artifact


def _int_kernel(dtype, exprs_of):
    """out[k, i] = exprs[k](x[i], y[i]) for every i; returns (module, count)."""
    n = var("n")
    x, y = var("x", tensor_type(dtype, [n])), var("y", tensor_type(dtype, [n]))
    i = var("i")
    exprs = exprs_of(x[i], y[i])
    out = var("out", tensor_type(dtype, [len(exprs), n]))
    body = ForStmt(i, n, seq(*[BufferStoreStmt(out, [const(k), i], cast(e, dtype)) for k, e in enumerate(exprs)]))
    return module("ints", [Function("ints", [x, y, out, n], body)]), len(exprs)


def _check_against_evaluator(backend, m, count, x, y, dtype):
    n = x.size
    lib, _ = build(backend, m)
    got = np.full((count, n), 0x5A, dtype)
    lib[m.name](x, y, got, n)
    want = np.full((count, n), 0x5A, dtype)
    with np.errstate(over="ignore"):  # numpy scalars wrap like C, and say so
        evaluate_function(m.functions[m.name], x, y, want, n)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8", "uint32", "uint8"])
def test_integer_ops_match_the_ir_semantics(cpu_backend, rng, dtype):
    info = np.iinfo(dtype)
    n = 37
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    x = rng.integers(lo, hi, n, dtype=dtype, endpoint=True)
    y = rng.integers(lo, hi, n, dtype=dtype, endpoint=True)
    y[y == 0] = 3
    if info.min < 0:
        x[:4], y[:4] = [-7, 7, -7, 7], [2, -2, -2, 2]  # truncating division and modulo signs

    def exprs(a, b):
        return [a + b, a - b, a * b, a // b, a % b, a & b, a | b, a ^ b, a >> 1, ~a, -a,
                minimum(a, b), maximum(a, b), if_then_else(a < b, a, b), equal(a, b), not_equal(a, b),
                logical_and(a < b, b <= a + 5), logical_or(logical_not(a < b), equal(a % 3, 0))]

    m, count = _int_kernel(dtype, exprs)
    _check_against_evaluator(cpu_backend, m, count, x, y, dtype)
    if info.min < 0:
        lib, _ = build(cpu_backend, m)
        got = np.zeros((count, n), dtype)
        lib["ints"](x, y, got, n)
        assert list(got[3, :4]) == [-3, -3, 3, 3] and list(got[4, :4]) == [-1, 1, -1, 1]


def _random_tree(r: random.Random, leaves, depth):
    if depth == 0 or r.random() < 0.2:
        return r.choice(leaves) if r.random() < 0.7 else r.randint(-9, 9)
    a, b = _random_tree(r, leaves, depth - 1), _random_tree(r, leaves, depth - 1)
    a = a if hasattr(a, "op") or hasattr(a, "hint") or hasattr(a, "base") else cast(a, "int64")
    op = r.choice(["add", "sub", "mul", "div", "mod", "and", "or", "xor", "shr", "lt", "eq", "min", "ite", "neg"])
    if op in ("div", "mod"):
        b = if_then_else(equal(b, 0), 7, b)
        return a // b if op == "div" else a % b
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "and": lambda: a & b,
            "or": lambda: a | b, "xor": lambda: a ^ b, "shr": lambda: a >> r.randint(0, 3),
            "lt": lambda: a < b, "eq": lambda: equal(a, b), "min": lambda: minimum(a, b),
            "ite": lambda: if_then_else(a < b, b, a - b), "neg": lambda: -a}[op]()


def test_random_expression_trees_parenthesize_correctly(cpu_backend, rng):
    """Random int64 trees (depth 4, small leaves: no overflow) print with exactly the
    parentheses C needs: compiled results equal the IR evaluator's."""
    r = random.Random(int(rng.integers(1 << 30)))
    m, count = _int_kernel("int64", lambda a, b: [_random_tree(r, [a, b], 4) for _ in range(60)])
    x, y = rng.integers(-50, 50, 9), rng.integers(-50, 50, 9)
    _check_against_evaluator(cpu_backend, m, count, x, y, "int64")


UNARY_DOMAINS = {
    "exp": (-10, 10), "log": (0.01, 100), "sqrt": (0, 100), "rsqrt": (0.01, 100), "tanh": (-5, 5),
    "erf": (-3, 3), "abs": (-10, 10), "floor": (-10, 10), "ceil": (-10, 10), "sin": (-6, 6), "cos": (-6, 6),
}
NUMPY = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v), "tanh": np.tanh,
         "erf": np.vectorize(__import__("math").erf), "abs": np.abs, "floor": np.floor, "ceil": np.ceil,
         "sin": np.sin, "cos": np.cos}


@pytest.mark.parametrize("dtype,tol", [("float32", 2e-6), ("float64", 1e-14), ("float16", 2e-3)])
def test_math_primitives_match_numpy(cpu_backend, rng, dtype, tol):
    n = 29
    names = list(UNARY_DOMAINS)
    ins = [var(f"in_{k}", tensor_type(dtype, [n])) for k in names]
    y, z = var("y", tensor_type(dtype, [n])), var("z", tensor_type(dtype, [n]))
    out = var("out", tensor_type(dtype, [len(names) + 4, n]))
    i = var("i")
    exprs = [P.math_primitive(k, x[i]) for k, x in zip(names, ins)]
    exprs += [P.pow_(y[i], z[i]), P.fmin(y[i], z[i]), P.fmax(y[i], z[i]), P.fma(y[i], z[i], y[i])]
    body = ForStmt(i, n, seq(*[BufferStoreStmt(out, [const(k), i], e) for k, e in enumerate(exprs)]))
    m = module("mathk", [Function("mathk", [*ins, y, z, out], body)])
    lib, _ = build(cpu_backend, m)
    args = [rng.uniform(*UNARY_DOMAINS[k], n).astype(dtype) for k in names]
    yv, zv = rng.uniform(0.5, 2, n).astype(dtype), rng.uniform(-2, 2, n).astype(dtype)
    got = np.full((len(names) + 4, n), np.nan, dtype)
    lib["mathk"](*args, yv, zv, got)
    want = [NUMPY[k](a.astype(np.float64)) for k, a in zip(names, args)]
    y64, z64 = yv.astype(np.float64), zv.astype(np.float64)
    want += [y64 ** z64, np.fmin(y64, z64), np.fmax(y64, z64), y64 * z64 + y64]
    want = np.array(want)
    err = np.abs(got.astype(np.float64) - want) / (np.abs(want) + 1e-2)
    assert err.max() < tol, [names + ["pow", "min", "max", "fma"]][0][int(np.argmax(err.max(1)))]
    # the Python implementations the IR evaluator uses agree too
    ev = np.full_like(got, np.nan)
    evaluate_function(m.functions["mathk"], *args, yv, zv, ev)
    assert (np.abs(ev.astype(np.float64) - want) / (np.abs(want) + 1e-2)).max() < tol


_ASSERT_RUNNER = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.checked.argtypes = [ctypes.c_void_p, ctypes.c_int32]
import numpy as np
a = np.zeros(4, np.int32)
lib.checked(a.ctypes.data, int(sys.argv[2]))
print("returned", a.tolist())
"""


def test_assert_passes_silently_and_aborts_with_message(cpu_backend, tmp_path):
    a, k, i = var("a", tensor_type("int32", [4])), var("k"), var("i")
    body = seq(AssertStmt(k < 4, 'k must be < 4 "quoted" */ ??/'),
               ForStmt(i, k, BufferStoreStmt(a, [i], i + 1)))
    m = module("asserts", [Function("checked", [a, k], body)])
    lib, artifact = build(cpu_backend, m)
    v = np.zeros(4, np.int32)
    lib["checked"](v, 3)
    assert list(v) == [1, 2, 3, 0]
    script = tmp_path / "run.py"
    script.write_text(_ASSERT_RUNNER)
    ok = subprocess.run([sys.executable, str(script), artifact.path, "2"], capture_output=True, text=True)
    assert ok.returncode == 0 and "returned [1, 2, 0, 0]" in ok.stdout
    bad = subprocess.run([sys.executable, str(script), artifact.path, "9"], capture_output=True, text=True,
                         env=dict(os.environ))
    assert bad.returncode != 0
    assert 'hidet assertion failed in checked: k must be < 4 "quoted" */ ??/' in bad.stderr
