"""CPU backend end to end on hand-written C: build (cached), load, call with numpy."""
from __future__ import annotations

import os
import stat
import subprocess

import numpy as np
import pytest

from hidet_framework.backend.naming import c_identifier
from hidet_framework.backend.signature import FunctionSignature, ParamSpec

VADD_SOURCE = r"""
#include <stdint.h>
/* hidet function: vadd */
void vadd(const float *restrict a, const float *restrict b, float *restrict c, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}
"""


def vadd_signature(n=None):
    return FunctionSignature("vadd", [
        ParamSpec("a", "tensor", "float32", (n,), writes=False),
        ParamSpec("b", "tensor", "float32", (n,), writes=False),
        ParamSpec("c", "tensor", "float32", (n,)),
        ParamSpec("n", "scalar", "int64"),
    ])


def relative_error(got, want):
    return np.max(np.abs(got.astype(np.float64) - want) / (np.abs(want) + 1e-6)) if want.size else 0.0


@pytest.mark.parametrize("n", [1, 7, 97, 1009, 65537])
def test_vector_add_matches_float64_reference(cpu_backend, rng, n):
    module = cpu_backend.load(cpu_backend.build(VADD_SOURCE, cpu_backend.detect_target()), [vadd_signature()])
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = np.full(n, np.nan, np.float32)  # poisoned: every element must be written
    module["vadd"](a, b, c, n)
    assert not np.isnan(c).any()
    assert relative_error(c, a.astype(np.float64) + b.astype(np.float64)) < 1e-6


def test_slow_path_arguments_still_work(cpu_backend, rng):
    """Read-only inputs, numpy-integer scalars and empty arrays miss the fast path."""
    module = cpu_backend.load(cpu_backend.build(VADD_SOURCE, cpu_backend.detect_target()), [vadd_signature()])
    a = rng.standard_normal(13).astype(np.float32)
    a.setflags(write=False)
    b = rng.standard_normal(13).astype(np.float32)
    c = np.full(13, np.nan, np.float32)
    module["vadd"](a, b, c, np.int64(13))
    np.testing.assert_allclose(c, a.astype(np.float64) + b, rtol=1e-6)
    empty = np.empty(0, np.float32)
    module["vadd"](empty, empty, empty, 0)


def test_second_build_starts_no_compiler(cpu_backend, monkeypatch):
    import hidet_plugin_cpu.build as build_mod

    target = cpu_backend.detect_target()
    first = cpu_backend.build(VADD_SOURCE, target)
    assert first.meta["cache_hit"] is False

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started on a cache hit: {args}")

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(build_mod.subprocess, "run", no_process)
    second = cpu_backend.build(VADD_SOURCE, target)
    assert second.meta["cache_hit"] is True and second.path == first.path


def test_corrupted_cached_library_is_rebuilt(cpu_backend, rng):
    target = cpu_backend.detect_target()
    first = cpu_backend.build(VADD_SOURCE + "/* corrupt me */\n", target)
    good = open(first.path, "rb").read()
    with open(first.path, "r+b") as f:  # not loaded in this process: safe to scribble on
        f.seek(len(good) // 2)
        f.write(b"\xde\xad\xbe\xef" * 16)
    second = cpu_backend.build(VADD_SOURCE + "/* corrupt me */\n", target)
    assert second.meta["cache_hit"] is False and open(second.path, "rb").read() == good
    module = cpu_backend.load(second, [vadd_signature()])
    a, b, c = (rng.standard_normal(31).astype(np.float32) for _ in range(3))
    module["vadd"](a, b, c, 31)
    np.testing.assert_allclose(c, a.astype(np.float64) + b, rtol=1e-6)


def test_cache_directory_is_private(cpu_backend, isolated_build_cache):
    cpu_backend.build(VADD_SOURCE, cpu_backend.detect_target())
    assert stat.S_IMODE(os.stat(isolated_build_cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(isolated_build_cache / "builds").st_mode) == 0o700


HOSTILE = 'add"; */ #include <stdio.h>\n int main() { /* 1x 名前 int'


def test_function_named_from_hostile_string(cpu_backend, rng):
    symbol = c_identifier(HOSTILE)
    source = (f"#include <stdint.h>\n/* hidet function: {symbol} */\n"
              f"void {symbol}(const double *x, double *y, double alpha, int32_t n) {{\n"
              f"    for (int32_t i = 0; i < n; i++) y[i] = alpha * x[i];\n}}\n")
    sig = FunctionSignature(HOSTILE, [ParamSpec("x", "tensor", "float64", (None,)),
                                      ParamSpec("y", "tensor", "float64", (None,)),
                                      ParamSpec("alpha", "scalar", "float64"),
                                      ParamSpec("n", "scalar", "int32")])
    module = cpu_backend.load(cpu_backend.build(source, cpu_backend.detect_target(), name=HOSTILE), [sig])
    assert module.function_names() == [HOSTILE]
    x = rng.standard_normal(11)
    y = np.full(11, np.nan)
    alpha = float(rng.uniform(0.5, 2.0))
    module[HOSTILE](x, y, alpha, 11)
    np.testing.assert_allclose(y, alpha * x, rtol=1e-12)


def test_argument_errors_are_clear(cpu_backend):
    module = cpu_backend.load(cpu_backend.build(VADD_SOURCE, cpu_backend.detect_target()), [vadd_signature(5)])
    vadd = module["vadd"]
    x = np.ones(5, np.float32)
    with pytest.raises(TypeError, match=r"vadd\(\) takes 4 argument\(s\) \(a, b, c, n\), got 3"):
        vadd(x, x, x)
    with pytest.raises(TypeError, match=r"vadd\(\) takes 4 argument\(s\).*got 5"):
        vadd(x, x, x, 5, 6)
    with pytest.raises(TypeError, match=r"parameter 1 'b' expects dtype float32, got .* float64"):
        vadd(x, x.astype(np.float64), x, 5)
    with pytest.raises(ValueError, match=r"parameter 2 'c' expects shape \(5,\), got .* \(6,\)"):
        vadd(x, x, np.ones(6, np.float32), 5)
    with pytest.raises(ValueError, match=r"'a' expects a C-contiguous array"):
        vadd(np.ones(10, np.float32)[::2], x, x, 5)
    with pytest.raises(TypeError, match=r"parameter 3 'n' expects an integer \(int64\), got float"):
        vadd(x, x, x, 5.0)
    with pytest.raises(KeyError, match="no function 'vad'"):
        module["vad"]
