"""Parallel loops through the thread pool (hidet_plugin_cpu/parallel.py, thread_pool.py):
every iteration runs exactly once for odd and prime extents, captured scalars, locals
and enclosing loop variables keep their values, small loops stay serial, a module
loaded without the pool falls back to OpenMP, concurrent callers, nested loops, the
thread count from OMP_NUM_THREADS, and a forked child."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from hidet_framework.ir import (
    BufferStoreStmt, DeclareStmt, ForStmt, Function, SeqStmt, const, module, seq, tensor_type, var,
)
from hidet_plugin_cpu.codegen import generate
from hidet_plugin_cpu.parallel import GRAIN_WORK, SERIAL_WORK, loop_work


def build(backend, m):
    source = generate(m, backend.detect_target())
    return backend.load(backend.build(source, backend.detect_target(), name=m.name), m), source


def count_kernel(n_extent=None):
    """y[i] += x[i] * s + 1 over a parallel loop: an iteration run twice (or never)
    shows in y, which starts at zero."""
    nv = var("n") if n_extent is None else None
    ext = nv if nv is not None else n_extent
    x, y = var("x", tensor_type("float32", [ext])), var("y", tensor_type("float32", [ext]))
    s = var("s", "float32")
    i = var("i")
    body = ForStmt(i, ext, BufferStoreStmt(y, [i], y[i] + x[i] * s + 1.0), parallel=True)
    params = [x, y, s] + ([nv] if nv is not None else [])
    return module("counted", [Function("counted", params, body)])


@pytest.mark.parametrize("n", [1, 2, 7, GRAIN_WORK - 1, GRAIN_WORK + 1, 65537, 1_000_003])
def test_every_iteration_runs_once(cpu_backend, rng, n):
    lib, source = build(cpu_backend, count_kernel())
    assert "hidet_parallel_for(" in source
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    lib["counted"](x, y, 1.5, n)
    np.testing.assert_allclose(y, x.astype(np.float64) * 1.5 + 1.0, rtol=1e-6, atol=1e-6)
    lib["counted"](x, y, 1.5, n)  # the pool is warm now: again, accumulating
    np.testing.assert_allclose(y, 2 * (x.astype(np.float64) * 1.5 + 1.0), rtol=1e-6, atol=1e-5)


def test_small_constant_loops_stay_serial(cpu_backend, rng):
    lib, source = build(cpu_backend, count_kernel(n_extent=SERIAL_WORK - 1))
    assert "hidet_parallel_for" not in source and "omp parallel" not in source
    x = rng.standard_normal(SERIAL_WORK - 1).astype(np.float32)
    y = np.zeros_like(x)
    lib["counted"](x, y, -2.0)
    np.testing.assert_allclose(y, x.astype(np.float64) * -2.0 + 1.0, rtol=1e-6, atol=1e-6)
    _, at = build(cpu_backend, count_kernel(n_extent=SERIAL_WORK))  # the threshold itself is shared
    assert "hidet_parallel_for(counted_par0_task" in at
    lib, big = build(cpu_backend, count_kernel(n_extent=SERIAL_WORK + 3))
    assert "hidet_parallel_for(" in big
    x = rng.standard_normal(SERIAL_WORK + 3).astype(np.float32)
    y = np.zeros_like(x)
    lib["counted"](x, y, 0.25)
    np.testing.assert_allclose(y, x.astype(np.float64) * 0.25 + 1.0, rtol=1e-6, atol=1e-6)


def test_grain_from_the_work_per_iteration(cpu_backend):
    """A parallel loop over rows of 4096 gets chunks of GRAIN_WORK / 4096 rows."""
    rows, cols = 1024, 4096
    y = var("y", tensor_type("float32", [rows, cols]))
    r, j = var("r"), var("j")
    body = ForStmt(r, rows, ForStmt(j, cols, BufferStoreStmt(y, [r, j], const(1.0))), parallel=True)
    source = generate(module("rows", [Function("rows", [y], body)]), cpu_backend.detect_target())
    assert f"(int64_t)(1024), {GRAIN_WORK // cols});" in source


def test_captures_locals_and_enclosing_loop_variables(cpu_backend, rng):
    """A parallel loop inside a serial one, reading a local declared before it."""
    rows, cols = 3, SERIAL_WORK + 29   # the inner loop alone is large enough for the pool
    x = var("x", tensor_type("float32", [rows, cols]))
    y = var("y", tensor_type("float32", [rows, cols]))
    r, j, off = var("r"), var("j"), var("off", "float32")
    inner = ForStmt(j, cols, BufferStoreStmt(y, [r, j], x[r, j] * 2.0 + off), parallel=True)
    body = ForStmt(r, rows, seq(DeclareStmt(off, r * 10.0), inner))
    lib, source = build(cpu_backend, module("rowwise", [Function("rowwise", [x, y], body)]))
    assert "hidet_parallel_for(" in source
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full((rows, cols), np.nan, np.float32)
    lib["rowwise"](a, out)
    want = a.astype(np.float64) * 2 + 10.0 * np.arange(rows)[:, None]
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)


def test_nested_parallel_loops_run_inside_one_task(cpu_backend, rng):
    rows, cols = 131, 1009            # 132k inner iterations: above SERIAL_WORK
    x = var("x", tensor_type("float32", [rows, cols]))
    y = var("y", tensor_type("float32", [rows, cols]))
    r, j = var("r"), var("j")
    inner = ForStmt(j, cols, BufferStoreStmt(y, [r, j], y[r, j] + x[r, j]), parallel=True)
    body = ForStmt(r, rows, inner, parallel=True)
    lib, source = build(cpu_backend, module("nested", [Function("nested", [x, y], body)]))
    assert source.count("hidet_parallel_for(") == 1 + 1  # the dispatch's definition + one call
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros((rows, cols), np.float32)
    lib["nested"](a, out)
    np.testing.assert_array_equal(out, a)


def test_concurrent_callers(cpu_backend, rng):
    """Two Python threads in the same kernel (ctypes releases the GIL): the second
    finds the pool busy and runs its loop itself."""
    lib, _ = build(cpu_backend, count_kernel())
    n = 300_007
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    ys = [np.zeros(n, np.float32) for _ in range(4)]
    errors = []

    def work(k):
        try:
            for _ in range(20):
                ys[k][:] = 0
                lib["counted"](xs[k], ys[k], 0.5, n)
                np.testing.assert_allclose(ys[k], xs[k].astype(np.float64) * 0.5 + 1.0, rtol=1e-6, atol=1e-6)
        except AssertionError as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_plain_ctypes_load_falls_back_to_openmp(cpu_backend, rng):
    """Loaded without the runtime (nothing sets the pool), the module's OpenMP loop
    over the same chunks runs it."""
    m = count_kernel()
    source = generate(m, cpu_backend.detect_target())
    artifact = cpu_backend.build(source, cpu_backend.detect_target(), name="fallback")
    lib = ctypes.CDLL(artifact.path)
    fn = lib.counted
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int32]
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    fn(x.ctypes.data, y.ctypes.data, 3.0, n)
    np.testing.assert_allclose(y, x.astype(np.float64) * 3.0 + 1.0, rtol=1e-6, atol=1e-5)


def test_openmp_switch_prints_the_old_pragma(cpu_backend, rng, monkeypatch):
    monkeypatch.setenv("HIDET_FRAMEWORK_CPU_PARALLEL", "openmp")
    lib, source = build(cpu_backend, count_kernel())
    assert "#pragma omp parallel for schedule(static)" in source and "hidet_parallel_for" not in source
    n = 70_001
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    lib["counted"](x, y, 2.0, n)
    np.testing.assert_allclose(y, x.astype(np.float64) * 2.0 + 1.0, rtol=1e-6, atol=1e-5)


def test_loop_work_estimates():
    i, j, k = var("i"), var("j"), var("k")
    y = var("y", tensor_type("float32", [64, 64]))
    store = BufferStoreStmt(y, [i, j], const(0.0))
    assert loop_work(store) == 1
    assert loop_work(ForStmt(j, 64, store)) == 64
    assert loop_work(ForStmt(k, 4, ForStmt(j, 64, store))) == 256
    assert loop_work(SeqStmt([ForStmt(j, 64, store), ForStmt(k, 32, store)])) == 96
    assert loop_work(ForStmt(j, var("n"), store)) == 16  # a symbolic extent counts as 16


_CHILD = textwrap.dedent("""
    import os, sys
    import numpy as np
    from hidet_framework.ir import BufferStoreStmt, ForStmt, Function, module, tensor_type, var
    from hidet_plugin_cpu import CpuBackend
    from hidet_plugin_cpu.codegen import generate
    from hidet_plugin_cpu.thread_pool import pool_threads

    backend = CpuBackend()
    nv = var("n")
    x, y = var("x", tensor_type("float32", [nv])), var("y", tensor_type("float32", [nv]))
    i = var("i")
    m = module("twice", [Function("twice", [x, y, nv],
                                  ForStmt(i, nv, BufferStoreStmt(y, [i], y[i] + x[i] * 2.0), parallel=True))])
    lib = backend.load(backend.build(generate(m), backend.detect_target(), name="twice"), m)
    n = 200_003
    a = np.arange(n, dtype=np.float32)

    def check():
        out = np.zeros(n, np.float32)
        lib["twice"](a, out, n)
        assert np.array_equal(out, a * 2), "wrong result"

    check()
    print("threads", pool_threads())
    pid = os.fork()
    if pid == 0:  # the child: a new pool on first use
        try:
            check()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "the forked child failed"
    check()
    print("ok")
""")


@pytest.mark.parametrize("threads", ["1", "3"])
def test_threads_from_omp_num_threads_and_fork(cpu_backend, tmp_path, threads):
    env = dict(os.environ, OMP_NUM_THREADS=threads, HIDET_FRAMEWORK_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"threads {threads}" in out.stdout and "ok" in out.stdout
