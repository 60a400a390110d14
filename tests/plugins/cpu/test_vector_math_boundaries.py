"""Vector math (hidet_plugin_cpu/vector_math.py) at its edges, by public behaviour:

- accuracy where results change regime: every float32 between neighbours of exp's
  overflow and underflow thresholds, log next to 1 and at denormals, erf and tanh where
  they round to +-1, sin and cos next to multiples of pi/2, pow near its overflow edge
  and for negative bases with integer exponents; and the float64 kernels (libmvec's
  double variants), within 4 float64 ULPs of a long double reference;
- which functions get SIMD declarations: all of them on x86-64 glibc >= 2.35, none with
  ``HIDET_FRAMEWORK_CPU_VECTOR_MATH=0``, off Linux or x86-64, without libmvec, or when the
  compiler cannot link it; and the scalar code then built is just as right.

Kernels run on arrays of prime length (vector lanes and the scalar tail), outputs
poisoned with NaN. Written for the mutation group ``cpu_parallel_math`` (issue 12)."""
from __future__ import annotations

import math
import os
import platform
import stat
import subprocess

import numpy as np
import pytest

from hidet_framework.ir.math_functions import cos, erf, exp, log, pow_, sin, tanh
from hidet_framework.lang import attrs, f32, f64, i32, parallel, script, script_module
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_cpu import vector_math
from hidet_plugin_cpu.build import COMPILER
from hidet_plugin_cpu.codegen import generate

TINY32 = 2.0 ** -149


def _prime(n: int) -> int:
    while any(n % p == 0 for p in range(2, int(n ** 0.5) + 1)):
        n += 1
    return n


def _prime_length(values: np.ndarray) -> np.ndarray:
    return np.resize(values, _prime(len(values)))


def ulp32(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in float32 ULPs at `want` (float64); 0 for equal infinities or two
    NaNs; inf when only one side is NaN or infinite."""
    got64 = got.astype(np.float64)
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32)
        scale = np.maximum(np.abs(np.spacing(np.abs(want32))).astype(np.float64), TINY32)
        err = np.abs(got64 - want) / scale
    same = (np.isnan(got64) & np.isnan(want)) | (np.isinf(got64) & np.isinf(want32) & (np.sign(got64) == np.sign(want)))
    err = np.where(np.isinf(want32) & ~np.isinf(want) & ~same, np.inf, err)
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))


def ulp64(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The same in float64 ULPs at a long double reference."""
    got_l = got.astype(np.longdouble)
    with np.errstate(all="ignore"):
        want64 = want.astype(np.float64)
        scale = np.maximum(np.abs(np.spacing(np.abs(want64))), 2.0 ** -1074).astype(np.longdouble)
        err = (np.abs(got_l - want) / scale).astype(np.float64)
    same = (np.isnan(got) & np.isnan(want64)) | (np.isinf(got) & np.isinf(want64) & (np.sign(got) == np.sign(want64)))
    err = np.where(np.isinf(want64) != np.isinf(got), np.inf, err)
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))


def _neighbours(x: float, count: int = 400, dtype=np.float32) -> np.ndarray:
    """`count` consecutive floats on each side of `x` (x's own rounding included)."""
    x = dtype(x)
    bits = np.array([x], dtype).view(np.int32 if dtype is np.float32 else np.int64)[0]
    steps = np.arange(-count, count + 1, dtype=np.int64)
    signed = (bits + steps).astype(np.int32 if dtype is np.float32 else np.int64)
    if bits >= 0:
        return signed[signed >= 0].view(dtype)
    return signed[signed < 0].view(dtype)


def _kernels(dtype):
    t = {"f32": f32, "f64": f64}[dtype]

    def unary(name, fn, t=t):  # t: a local of the frame applying @script
        @script(name=f"vm_{name}_{dtype}")
        def k(n: i32, a: t[n], c: t[n]):
            attrs.func_kind = "cpu_kernel"
            for i in parallel(n):
                c[i] = fn(a[i])
        return k

    @script(name=f"vm_pow_{dtype}")
    def pow_k(n: i32, a: t[n], b: t[n], c: t[n]):
        attrs.func_kind = "cpu_kernel"
        for i in parallel(n):
            c[i] = pow_(a[i], b[i])
    fns = {"exp": exp, "log": log, "erf": erf, "tanh": tanh, "sin": sin, "cos": cos}
    return [unary(name, fn) for name, fn in fns.items()] + [pow_k]


@pytest.fixture(scope="module")
def library(cpu_backend):
    module = lower(script_module(*_kernels("f32"), *_kernels("f64"), name="vector_math_edges"), "cpu")
    return generate(module), cpu_backend.compile(module)


def _run32(library, name, a, b=None):
    a = _prime_length(np.asarray(a, np.float32))
    c = np.full_like(a, np.nan)
    if b is None:
        library[1][f"vm_{name}_f32"](len(a), a, c)
        return a, c
    b = np.resize(np.asarray(b, np.float32), len(a))
    library[1][f"vm_{name}_f32"](len(a), a, b, c)
    return a, b, c


_erf64 = np.vectorize(math.erf, otypes=[np.float64])
F32_EDGES = {
    # function: (reference, points whose float32 neighbourhoods are checked)
    "exp": (np.exp, [math.log(np.finfo(np.float32).max), math.log(np.finfo(np.float32).tiny), math.log(TINY32),
                     math.log(TINY32 / 2), 0.0, -0.0, 1e-30]),
    "log": (np.log, [1.0, 2.0, 0.5, TINY32 * 1024, np.finfo(np.float32).tiny, float(np.finfo(np.float32).max)]),
    "erf": (_erf64, [0.0, 1e-30, 0.84, 3.92, -3.92, 2.0 ** -100]),
    "tanh": (np.tanh, [0.0, 0.55, 9.01, -9.01, 2.0 ** -12, 1e-38]),
    "sin": (np.sin, [k * math.pi / 2 for k in (1, 2, 3, 4, 101, 1001)] + [1e4, 1e30]),
    "cos": (np.cos, [k * math.pi / 2 for k in (1, 2, 3, 4, 101, 1001)] + [1e4, 1e30]),
}


@pytest.mark.parametrize("name", sorted(F32_EDGES))
def test_float32_bounds_hold_next_to_regime_changes(library, name):
    reference, points = F32_EDGES[name]
    a = np.concatenate([_neighbours(p) for p in points] + [-_neighbours(p) for p in points])
    a, c = _run32(library, name, a)
    with np.errstate(all="ignore"):
        want = reference(a.astype(np.float64))
    err = ulp32(c, want)
    worst = int(np.argmax(err))
    bound = vector_math.ULP_BOUNDS[name]
    assert err[worst] <= bound, f"{name}({a[worst]!r}) = {c[worst]!r}, float64 {want[worst]!r}: {err[worst]:.3g} ULP"


def test_exp_overflows_and_underflows_where_float32_does(library):
    big = np.array([0x42B17217], np.uint32).view(np.float32)[0]   # the largest x whose exp is finite
    a, c = _run32(library, "exp", [big, np.nextafter(big, np.float32(np.inf)), -103.98, -200.0, -np.inf, np.inf])
    assert np.isfinite(c[0]) and c[1] == np.inf
    assert c[2] == 0.0 and c[3] == 0.0 and c[4] == 0.0 and c[5] == np.inf


def test_log_of_zero_negative_and_infinity(library):
    a, c = _run32(library, "log", [0.0, -0.0, -1.0, -TINY32, np.inf, -np.inf, np.nan])
    assert c[0] == -np.inf and c[1] == -np.inf
    assert np.isnan(c[2]) and np.isnan(c[3]) and c[4] == np.inf and np.isnan(c[5]) and np.isnan(c[6])


def test_pow_edges(library, rng):
    """Negative bases with integer exponents keep the sign rule; results next to
    float32's overflow and underflow; x near 1 to large powers; IEEE special cases."""
    x = np.concatenate([-rng.uniform(0.5, 3.0, 200), rng.uniform(0.999, 1.001, 200),
                        [2.0] * 8, [0.5] * 8]).astype(np.float32)
    y = np.concatenate([rng.integers(-9, 10, 200), rng.uniform(-3e4, 3e4, 200),
                        [127.0, 127.99, 128.0, -126.0, -149.0, -149.5, -150.0, -151.0],
                        [-127.0, -127.99, -128.0, 126.0, 149.0, 149.5, 150.0, 151.0]]).astype(np.float32)
    a, b, c = _run32(library, "pow", x, y)
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64))
    err = ulp32(c, want)
    worst = int(np.argmax(err))
    assert err[worst] <= vector_math.ULP_BOUNDS["pow"], f"pow({a[worst]!r}, {b[worst]!r}) = {c[worst]!r}"
    special = [(0.0, -1.0, np.inf), (-0.0, -1.0, -np.inf), (-0.0, -2.0, np.inf), (1.0, np.nan, 1.0),
               (np.nan, 0.0, 1.0), (-1.0, np.inf, 1.0), (0.5, np.inf, 0.0), (2.0, -np.inf, 0.0),
               (-2.0, 0.5, np.nan), (-np.inf, 3.0, -np.inf), (-np.inf, -3.0, -0.0)]
    xs, ys, wants = (np.array(v, np.float32) for v in zip(*special))
    a, b, c = _run32(library, "pow", xs, ys)
    for k, w in enumerate(wants):
        assert (np.isnan(c[k]) and np.isnan(w)) or (c[k] == w and np.signbit(c[k]) == np.signbit(w)), \
            (xs[k], ys[k], c[k], w)


F64_REFERENCE = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sin": np.sin, "cos": np.cos}


@pytest.mark.parametrize("name", sorted(F64_REFERENCE) + ["erf", "pow"])
def test_float64_kernels_stay_within_4_ulp(library, rng, name):
    """libmvec's double variants (glibc documents 4 ULP): every float64 binade from
    1e-300 to 1e300 and both signs, special values, and regime edges."""
    exps = rng.uniform(-300, 300, 4000)
    a = (rng.uniform(1, 10, 4000) * 10.0 ** exps) * rng.choice([-1.0, 1.0], 4000)
    a = np.concatenate([a, rng.uniform(-30, 30, 2000), [0.0, -0.0, np.inf, -np.inf, np.nan, 709.78, 709.79,
                                                         -745.2, -745.1, 1.0, 5e-324, 19.07, 1e22]])
    a = np.resize(a, _prime(len(a)))
    c = np.full_like(a, np.nan)
    if name == "pow":
        x, y = np.abs(a), np.resize(np.concatenate([rng.uniform(-8, 8, 3000), rng.integers(-20, 21, 3000)]), len(a))
        library[1]["vm_pow_f64"](len(a), x, y, c)
        with np.errstate(all="ignore"):
            want = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
        bound = 4.0
    else:
        library[1][f"vm_{name}_f64"](len(a), a, c)
        with np.errstate(all="ignore"):
            # math.erf is double precision itself (about 1 ULP): one more ULP allowed there
            want = _erf64(a).astype(np.longdouble) if name == "erf" else F64_REFERENCE[name](a.astype(np.longdouble))
        bound = 5.0 if name == "erf" else 4.0
    if name in ("sin", "cos"):
        # long double sin/cos of a huge double are themselves only as good as their range
        # reduction; keep the arguments where it is exact
        keep = np.abs(a) < 1e15
        a, c, want = a[keep], c[keep], want[keep]
    err = ulp64(c, want)
    worst = int(np.argmax(err))
    assert err[worst] <= bound, f"{name}({a[worst]!r}) = {c[worst]!r} vs {want[worst]!r}: {err[worst]:.3g} ULP"


# ------------------------------------------------------------------ which functions

@pytest.fixture
def fresh_probe():
    """available_vector_functions is cached per process: cleared around the test."""
    vector_math.available_vector_functions.cache_clear()
    yield vector_math.available_vector_functions
    vector_math.available_vector_functions.cache_clear()


def _glibc_at_least(major: int, minor: int) -> bool:
    lib, version = platform.libc_ver()
    try:
        return lib == "glibc" and tuple(int(v) for v in version.split(".")[:2]) >= (major, minor)
    except ValueError:
        return False


def _links_libmvec(tmp_path) -> bool:
    """An oracle independent of vector_math: does the compiler link a program with
    -lmvec here?"""
    src = tmp_path / "probe.c"
    src.write_text("int main(void) { return 0; }\n")
    try:
        done = subprocess.run([COMPILER, str(src), "-o", str(tmp_path / "probe"), "-lmvec"], capture_output=True,
                              timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def test_every_function_is_found_on_x86_64_glibc_2_35(fresh_probe, monkeypatch, tmp_path):
    monkeypatch.delenv("HIDET_FRAMEWORK_CPU_VECTOR_MATH", raising=False)
    if platform.system() != "Linux" or platform.machine() != "x86_64" or not _glibc_at_least(2, 35):
        pytest.skip("needs x86-64 Linux with glibc >= 2.35 (libmvec with erf and tanh)")
    if not _links_libmvec(tmp_path):
        pytest.skip("the compiler cannot link -lmvec here (no libc6-dev)")
    found = fresh_probe(COMPILER)
    assert set(found) == set(vector_math.VECTOR_FUNCTIONS)
    assert found == tuple(vector_math.VECTOR_FUNCTIONS)    # in the table's order: stable sources
    assert fresh_probe() == found                          # the default compiler is gcc
    assert vector_math.link_flags(found) == ("-lmvec",)


@pytest.mark.parametrize("case", ["switched_off", "other_os", "other_cpu", "no_libmvec", "no_compiler",
                                  "compiler_without_libmvec", "compiler_gives_missing_path"])
def test_no_simd_declarations_where_they_cannot_work(fresh_probe, monkeypatch, tmp_path, case):
    monkeypatch.delenv("HIDET_FRAMEWORK_CPU_VECTOR_MATH", raising=False)
    compiler = COMPILER
    if case == "switched_off":
        monkeypatch.setenv("HIDET_FRAMEWORK_CPU_VECTOR_MATH", "0")
    elif case == "other_os":
        monkeypatch.setattr(platform, "system", lambda: "Darwin")
    elif case == "other_cpu":
        monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    elif case == "no_libmvec":
        monkeypatch.setattr(vector_math, "_LIBMVEC_SONAME", "libmvec-not-here.so.9")
    elif case == "no_compiler":
        compiler = str(tmp_path / "no-such-cc")
    else:  # a compiler that answers like gcc does without the library, or with a stale path
        answer = "libmvec.so" if case == "compiler_without_libmvec" else str(tmp_path / "gone" / "libmvec.so")
        # gcc prints the bare name when it has no such library: a file of that name in
        # the working folder must not count
        monkeypatch.chdir(tmp_path)
        (tmp_path / "libmvec.so").write_bytes(b"")
        compiler = str(tmp_path / "cc")
        with open(compiler, "w") as f:
            f.write(f"#!/bin/sh\necho {answer}\n")
        os.chmod(compiler, stat.S_IRWXU)
    assert fresh_probe(compiler) == ()
    assert vector_math.declarations(fresh_probe(compiler)) == []
    assert vector_math.link_flags(fresh_probe(compiler)) == ()


def test_the_probe_accepts_what_this_machine_has(fresh_probe, monkeypatch, tmp_path):
    """Spellings of the same machine: "AMD64" and upper case are x86-64 too."""
    monkeypatch.delenv("HIDET_FRAMEWORK_CPU_VECTOR_MATH", raising=False)
    if platform.system() != "Linux" or platform.machine() != "x86_64" or not _links_libmvec(tmp_path):
        pytest.skip("needs x86-64 Linux whose compiler links -lmvec")
    real = fresh_probe(COMPILER)
    assert real
    for spelling in ("AMD64", "X86_64"):
        fresh_probe.cache_clear()
        monkeypatch.setattr(platform, "machine", lambda s=spelling: s)
        assert fresh_probe(COMPILER) == real
    fresh_probe.cache_clear()
    monkeypatch.setenv("HIDET_FRAMEWORK_CPU_VECTOR_MATH", "1")
    assert fresh_probe(COMPILER) == real


def test_scalar_build_without_vector_math_is_as_right(cpu_backend, fresh_probe, monkeypatch, rng):
    """Switched off, the generated C declares no SIMD variant and the results keep the
    same bounds (scalar libm)."""
    monkeypatch.setenv("HIDET_FRAMEWORK_CPU_VECTOR_MATH", "0")
    module = lower(script_module(*_kernels("f32")[:2], name="scalar_math"), "cpu")
    source = generate(module)
    assert "declare simd" not in source
    library = (source, cpu_backend.compile(module))
    a = rng.uniform(-100, 100, 10_007).astype(np.float32)
    for name, reference in (("exp", np.exp), ("log", np.log)):
        x, c = _run32(library, name, np.abs(a) if name == "log" else a)
        with np.errstate(all="ignore"):
            assert ulp32(c, reference(x.astype(np.float64))).max() <= vector_math.ULP_BOUNDS[name]
