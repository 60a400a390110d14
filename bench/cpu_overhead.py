"""Per-call overhead of the CPU runtime, next to a plain ctypes call and numpy.

    python bench/cpu_overhead.py [--calls N]

Prints the median time per call (microseconds) of: a compiled no-op through the
runtime; the same no-op through bare ctypes; a 1-element float32 add through the
runtime (3 array pointers + 1 int64 checked and converted); the same add through bare
ctypes with ``a.ctypes.data`` pointers (the usual way); and ``np.add`` on 1 element.
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


def median_us(fn, calls: int, rounds: int = 15) -> float:
    """Median over `rounds` of the mean time per call of `calls` back-to-back calls."""
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter_ns() - start) / calls / 1e3)
    return statistics.median(per_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
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


if __name__ == "__main__":
    main()
