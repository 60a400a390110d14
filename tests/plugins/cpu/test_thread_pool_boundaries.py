"""The thread pool at its edges (hidet_plugin_cpu/thread_pool.py), driven directly
through ``hidet_parallel_for`` with a Python task that records the ranges it is given:
the chunks cover [0, n) exactly once and have the documented size
``max(grain, ceil(n / (8 * threads)))``, zero and negative sizes run nothing, a grain
below 1 counts as 1, a loop of one chunk and a nested loop run whole on the calling
thread, a task that fails in a worker does not wedge the pool; and the Python side:
``HIDET_FRAMEWORK_CPU_POOL=0`` or a pool that cannot be built leaves modules on their
OpenMP fallback, with right results. Written for the mutation group ``cpu_parallel_math``
(issue 12)."""
from __future__ import annotations

import ctypes
import math
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from hidet_framework.ir import BufferStoreStmt, ForStmt, Function, module, tensor_type, var
from hidet_plugin_cpu import thread_pool
from hidet_plugin_cpu.codegen import generate

TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
PFOR = ctypes.CFUNCTYPE(None, TASK, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def _pool():
    address = thread_pool.pool_function_address()
    if address is None:
        pytest.skip("no thread pool on this machine (modules use their OpenMP loop)")
    return PFOR(address)


class Recorder:
    """A pool task that records (begin, end, thread) per call."""

    def __init__(self, fail_at: int | None = None, inner=None):
        self.calls: list[tuple[int, int, int]] = []
        self.lock = threading.Lock()
        self.fail_at, self.inner = fail_at, inner
        self.fn = TASK(self._run)

    def _run(self, ctx, begin, end):
        with self.lock:
            self.calls.append((begin, end, threading.get_ident()))
        if self.inner is not None:
            self.inner(begin, end)
        if begin == self.fail_at:
            raise RuntimeError("this chunk fails")

    def ranges(self) -> list[tuple[int, int]]:
        return sorted((b, e) for b, e, _ in self.calls)


def expected_ranges(n: int, grain: int, threads: int) -> list[tuple[int, int]]:
    """What the pool's documentation promises for [0, n)."""
    if n <= 0:
        return []
    grain = max(grain, 1)
    if threads <= 1 or n <= grain:
        return [(0, n)]
    chunk = max(grain, math.ceil(n / (8 * threads)))
    return [(b, min(b + chunk, n)) for b in range(0, n, chunk)]


@pytest.mark.parametrize("n,grain", [(0, 1), (-7, 1), (1, 1), (2, 1), (5, 5), (6, 5), (17, 0), (17, -3),
                                     (97, 1), (1000, 7), (1024, 64), (4099, 1), (10_007, 2000)])
def test_chunks_cover_the_range_once_with_the_documented_size(n, grain):
    pfor = _pool()
    threads = thread_pool.pool_threads()
    assert threads >= 1
    rec = Recorder()
    pfor(rec.fn, None, n, grain)
    assert rec.ranges() == expected_ranges(n, grain, threads)
    if n > 0 and (threads <= 1 or n <= max(grain, 1)):
        assert rec.calls[0][2] == threading.get_ident()  # one chunk: run by the caller


def test_a_nested_loop_runs_whole_on_the_thread_of_its_chunk():
    pfor = _pool()
    inner_calls = []

    def inner(begin, end):
        rec = Recorder()
        pfor(rec.fn, None, 50, 1)
        inner_calls.append((rec.ranges(), rec.calls[0][2], threading.get_ident()))

    outer = Recorder(inner=inner)
    pfor(outer.fn, None, 40, 1)
    assert outer.ranges() == expected_ranges(40, 1, thread_pool.pool_threads())
    assert len(inner_calls) == len(outer.calls)
    for ranges, ran_on, chunk_thread in inner_calls:
        assert ranges == [(0, 50)] and ran_on == chunk_thread


def test_a_failing_chunk_does_not_wedge_the_pool(monkeypatch):
    """A task that raises (ctypes reports and drops the exception) costs only its own
    chunk: the others run, the job ends, and the next job runs in full."""
    pfor = _pool()
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    threads = thread_pool.pool_threads()
    n, grain = 5000, 1
    want = expected_ranges(n, grain, threads)
    failing = Recorder(fail_at=want[len(want) // 2][0])
    pfor(failing.fn, None, n, grain)
    assert failing.ranges() == want
    assert [str(e) for e in reported] == ["this chunk fails"]
    again = Recorder()
    pfor(again.fn, None, n, grain)
    assert again.ranges() == want


_CHUNKS_CHILD = textwrap.dedent("""
    import ctypes, math, threading
    from hidet_plugin_cpu import thread_pool

    TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    pfor = ctypes.CFUNCTYPE(None, TASK, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        thread_pool.pool_function_address())
    threads = thread_pool.pool_threads()
    print("threads", threads)
    for n, grain in [(1, 1), (24, 1), (25, 1), (23, 3), (2401, 1), (2401, 100), (100, 100), (101, 100)]:
        calls, lock = [], threading.Lock()
        def run(ctx, b, e):
            with lock:
                calls.append((b, e, threading.get_ident()))
            if b == 0 and n > 1000:
                raise ValueError("chunk 0 fails")
        fn = TASK(run)
        for _ in range(3):
            calls.clear()
            pfor(fn, None, n, grain)
            if n <= grain:
                want = [(0, n)]
            else:
                chunk = max(grain, math.ceil(n / (8 * threads)))
                want = [(b, min(b + chunk, n)) for b in range(0, n, chunk)]
            got = sorted((b, e) for b, e, _ in calls)
            assert got == want, (n, grain, got[:5], want[:5])
    print("ok")
""")


def test_chunking_with_three_threads_in_a_fresh_process(tmp_path):
    """The same promises with a real team of three (the tests' own process may run
    with one thread), a failing chunk included."""
    env = dict(os.environ, OMP_NUM_THREADS="3", HIDET_FRAMEWORK_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", _CHUNKS_CHILD], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "threads 3" in out.stdout and "ok" in out.stdout


# ------------------------------------------------------------------ the Python side

def _count_kernel():
    nv = var("n")
    x, y = var("x", tensor_type("float32", [nv])), var("y", tensor_type("float32", [nv]))
    i = var("i")
    body = ForStmt(i, nv, BufferStoreStmt(y, [i], y[i] + x[i] * 2.0 + 1.0), parallel=True)
    return module("pooled", [Function("pooled", [x, y, nv], body)])


def _check_kernel(cpu_backend, rng, name):
    m = _count_kernel()
    source = generate(m, cpu_backend.detect_target())
    assert "hidet_parallel_for(" in source
    lib = cpu_backend.load(cpu_backend.build(source, cpu_backend.detect_target(), name=name), m)
    for n in (0, 1, 300_007):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.zeros(n, np.float32)
        lib["pooled"](x, y, n)
        np.testing.assert_allclose(y, x.astype(np.float64) * 2.0 + 1.0, rtol=1e-6, atol=1e-6)


def test_the_pool_is_built_once_and_reached_by_modules(cpu_backend, rng):
    address = thread_pool.pool_function_address()
    assert isinstance(address, int) and address == thread_pool.pool_function_address()
    assert thread_pool._library() is thread_pool._library()
    threads = thread_pool.pool_threads()
    assert isinstance(threads, int) and threads >= 1
    _check_kernel(cpu_backend, rng, "pooled_on")


@pytest.mark.parametrize("how", ["env", "build_fails"])
def test_without_a_pool_modules_use_their_fallback_loop(cpu_backend, rng, monkeypatch, how):
    monkeypatch.setattr(thread_pool, "_pool", [])          # as in a fresh process
    if how == "env":
        monkeypatch.setenv("HIDET_FRAMEWORK_CPU_POOL", "0")
    else:
        def no_compiler():
            raise OSError("gcc: not found")

        monkeypatch.setenv("HIDET_FRAMEWORK_CPU_POOL", "1")
        monkeypatch.setattr(thread_pool, "_load", no_compiler)
    assert thread_pool.pool_function_address() is None
    assert thread_pool.pool_threads() == 0
    _check_kernel(cpu_backend, rng, f"pooled_off_{how}")


def test_the_pool_switch_only_turns_off_at_zero(monkeypatch):
    monkeypatch.setattr(thread_pool, "_pool", [])
    monkeypatch.setenv("HIDET_FRAMEWORK_CPU_POOL", "1")
    assert thread_pool.pool_function_address() is not None
    monkeypatch.setattr(thread_pool, "_pool", [])
    monkeypatch.delenv("HIDET_FRAMEWORK_CPU_POOL")
    assert thread_pool.pool_threads() >= 1
