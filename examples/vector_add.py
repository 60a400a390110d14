"""Vector addition written in the script DSL.

Prints the IR of the kernel and runs it with the IR evaluator (the reference
semantics, pure Python) against numpy. Once the CPU backend lands, the same function
compiles to C with OpenMP: the `parallel` loop's iterations become threads.

    PYTHONPATH=. python examples/vector_add.py
"""
from __future__ import annotations  # lets `f32[n]` name the parameter `n`

import numpy as np

from hidet_framework.ir.evaluator import evaluate_function
from hidet_framework.lang import attrs, f32, i32, parallel, script, script_module

NUM_THREADS = 4  # a host value: the kernel is specialised for it while tracing


@script
def vector_add(n: i32, a: f32[n], b: f32[n], c: f32[n]):
    """c = a + b; worker w handles elements w, w + NUM_THREADS, ..."""
    attrs.func_kind = "cpu_kernel"
    for w in parallel(NUM_THREADS):
        for i in range(w, n, NUM_THREADS):
            c[i] = a[i] + b[i]


def main() -> None:
    print(script_module(vector_add, name="vector_add"))
    n = 37
    rng = np.random.default_rng()
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    c = np.full(n, np.nan, dtype="float32")  # poisoned: every element must be written
    evaluate_function(vector_add.ir, n, a, b, c)
    error = float(np.max(np.abs(c - (a.astype("float64") + b))))
    print(f"\nevaluated for n={n}: max abs error vs numpy = {error:.3g}")
    assert error < 1e-6


if __name__ == "__main__":
    main()
