"""Per-call overhead of the CPU runtime, next to a plain ctypes call and numpy.

    python bench/cpu_overhead.py [--calls N]

Prints the median time per call (microseconds) of: a compiled no-op through the
runtime; the same no-op through bare ctypes; a 1-element float32 add through the
runtime (3 array pointers + 1 int64 checked and converted); the same add through bare
ctypes with ``a.ctypes.data`` pointers (the usual way); and ``np.add`` on 1 element.
Then compiled graphs (`graph_rows`): what ``fn(x, y)`` adds to its kernels (issue 15's
target, at most 5 us) and a 64k-element add through the thread pool against the same
add compiled with an OpenMP region (``HIDET_FRAMEWORK_CPU_PARALLEL=openmp``).

``--clock cpu`` times the graph rows with the calling thread's CPU time
(``time.thread_time_ns``): on a loaded machine wall time counts the waits for a core
(2-3x the call's work at load 10), CPU time does not. Run it with
``OMP_NUM_THREADS=1``: pool workers' time is not the calling thread's.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import tempfile
import time

import numpy as np

SOURCE = r"""
#include <stdint.h>
void noop(void) {}
/* no OpenMP here on purpose: this measures call overhead, not thread start-up */
void add(const float *a, const float *b, float *c, int64_t n) {
    for (int64_t i = 0; i < n; i++) c[i] = a[i] + b[i];
}
"""


def median_us(fn, calls: int, rounds: int = 15, clock=time.perf_counter_ns) -> float:
    """Median over `rounds` of the mean time per call of `calls` back-to-back calls."""
    per_call = []
    for _ in range(rounds):
        start = clock()
        for _ in range(calls):
            fn()
        per_call.append((clock() - start) / calls / 1e3)
    return statistics.median(per_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="cpu: the calling thread's CPU time for the graph rows (use OMP_NUM_THREADS=1)")
    args = parser.parse_args()
    os.environ.setdefault("HIDET_FRAMEWORK_CACHE", tempfile.mkdtemp(prefix="hf-bench-cache-"))

    from hidet_framework.backend.signature import FunctionSignature, ParamSpec
    from hidet_plugin_cpu import CpuBackend

    backend = CpuBackend()
    availability = backend.availability()
    if not availability:
        raise SystemExit(f"CPU backend not usable: {availability.reason}")
    artifact = backend.build(SOURCE, backend.detect_target(), name="overhead")
    tensor = lambda name: ParamSpec(name, "tensor", "float32", (1,))  # noqa: E731
    module = backend.load(artifact, [
        FunctionSignature("noop", []),
        FunctionSignature("add", [tensor("a"), tensor("b"), tensor("c"), ParamSpec("n", "scalar", "int64")]),
    ])

    raw = ctypes.CDLL(artifact.path)
    raw_noop, raw_add = raw.noop, raw.add
    raw_noop.argtypes, raw_noop.restype = [], None
    raw_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    raw_add.restype = None

    rng = np.random.default_rng()
    a, b = rng.standard_normal(1).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    c = np.full(1, np.nan, np.float32)
    noop, add = module["noop"], module["add"]
    add(a, b, c, 1)
    assert c[0] == np.float32(a[0] + b[0]), "the compiled add is wrong"

    rows = [
        ("hidet cpu runtime: no-op", lambda: noop()),
        ("plain ctypes: no-op", lambda: raw_noop()),
        ("hidet cpu runtime: 1-element add (checked)", lambda: add(a, b, c, 1)),
        ("plain ctypes: 1-element add (a.ctypes.data, unchecked)",
         lambda: raw_add(a.ctypes.data, b.ctypes.data, c.ctypes.data, 1)),
        ("numpy: np.add(a, b, out=c) on 1 element", lambda: np.add(a, b, out=c)),
        ("python: empty lambda (loop + call floor)", lambda: None),
    ]
    print(f"per-call overhead, median of 15 rounds x {args.calls} calls (cache: {'hit' if artifact.meta['cache_hit'] else 'built'})")
    width = max(len(name) for name, _ in rows)
    for name, fn in rows:
        print(f"  {name:<{width}}  {median_us(fn, args.calls):7.3f} us")
    graph_rows(max(200, args.calls // 10), time.thread_time_ns if args.clock == "cpu" else time.perf_counter_ns)


def graph_rows(calls: int, clock=time.perf_counter_ns) -> None:
    """Compiled graphs: what a call adds to its kernels (the issue-15 target: at most
    5 us, median over 2,000 calls), and a parallel loop's dispatch through the thread
    pool against the OpenMP region it replaced (the same 64k-element add compiled both
    ways, interleaved)."""
    import hidet_framework as hf

    from hidet_framework.driver.task_compiler import clear_task_cache

    def compiled(n, parallel="pool"):
        clear_task_cache()  # the same task compiled again, not served from the process's cache
        os.environ["HIDET_FRAMEWORK_CPU_PARALLEL"] = parallel  # read when the C is generated
        try:
            x, y = hf.symbol((n,), "float32"), hf.symbol((n,), "float32")
            return hf.compile(hf.trace(hf.ops.add(x, y), inputs=[x, y]), target="cpu", space=0)
        finally:
            os.environ.pop("HIDET_FRAMEWORK_CPU_PARALLEL", None)

    def kernels(fn, arrays):
        direct = fn._direct  # the bound launches with this call's arrays (private: measured around)
        out = np.empty_like(arrays[0])
        plan = [(f, [out if kind else arrays[k] for _, kind, k in changes], changes, args)
                for f, args, changes in direct._plan]
        bound = []
        for f, subs, changes, args in plan:
            args = list(args)
            for (arg, _, _), value in zip(changes, subs):
                args[arg] = value
            bound.append((f, tuple(args)))

        def run():
            for f, a in bound:
                f(*a)
        return run

    rng = np.random.default_rng(0)
    one = [rng.standard_normal(1).astype(np.float32) for _ in range(2)]
    big = [rng.standard_normal(1 << 16).astype(np.float32) for _ in range(2)]
    tiny, pool, omp = compiled(1), compiled(1 << 16), compiled(1 << 16, "openmp")
    cases = [("graph: 1-element add, fn(x, y)", lambda: tiny(*one)),
             ("graph: 1-element add, its kernels alone", kernels(tiny, one)),
             ("graph: 64k-element add, thread pool, fn(x, y)", lambda: pool(*big)),
             ("graph: 64k-element add, OpenMP static, fn(x, y)", lambda: omp(*big)),
             ("numpy: np.add on 64k elements", lambda: np.add(*big))]
    times = {name: [] for name, _ in cases}
    for _ in range(3):  # interleaved rounds
        for name, fn in cases:
            times[name].append(median_us(fn, calls, rounds=5, clock=clock))
    width = max(len(name) for name, _ in cases)
    what = "CPU time of the calling thread" if clock is time.thread_time_ns else "wall time"
    print(f"compiled graphs, {os.environ.get('OMP_NUM_THREADS', 'all')} threads, {what}, median of 3 interleaved "
          f"rounds (each the median of 5 x {calls} calls), load average {os.getloadavg()[0]:.1f}:")
    for name, _ in cases:
        print(f"  {name:<{width}}  {statistics.median(times[name]):7.3f} us")
    added = statistics.median(times[cases[0][0]]) - statistics.median(times[cases[1][0]])
    print(f"  a call adds {added:.2f} us to its kernels (target <= 5 us)")


if __name__ == "__main__":
    main()
