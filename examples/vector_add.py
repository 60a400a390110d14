"""Vector addition written in the script DSL, compiled to C and run on the CPU.

Prints the IR of the kernel, lowers it and compiles it with the CPU backend (C with
OpenMP: the `parallel` loop's iterations become threads), runs it on numpy arrays
against numpy, and runs the IR evaluator (the reference semantics, pure Python) on the
same inputs as a second opinion.

    python examples/vector_add.py
"""
from __future__ import annotations  # lets `f32[n]` name the parameter `n`

import numpy as np

from hidet_framework.extension import plugin_host
from hidet_framework.analysis.evaluator import evaluate_function
from hidet_framework.lang import attrs, f32, i32, parallel, script, script_module
from hidet_framework.lowering.pipeline import lower

NUM_THREADS = 4  # a host value: the kernel is specialised for it while tracing


@script
def vector_add(n: i32, a: f32[n], b: f32[n], c: f32[n]):
    """c = a + b; worker w handles elements w, w + NUM_THREADS, ..."""
    attrs.func_kind = "cpu_kernel"
    for w in parallel(NUM_THREADS):
        for i in range(w, n, NUM_THREADS):
            c[i] = a[i] + b[i]


def max_error(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    assert not np.isnan(c).any(), "an output element was never written"
    return float(np.max(np.abs(c - (a.astype("float64") + b))))


def main() -> None:
    module = script_module(vector_add, name="vector_add")
    print(module)
    kernels = plugin_host().backend_for("cpu").compile(lower(module, "cpu"))

    n = 1009  # prime: no worker gets an even share
    rng = np.random.default_rng()
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    c = np.full(n, np.nan, dtype="float32")  # poisoned: every element must be written
    kernels["vector_add"](n, a, b, c)
    error = max_error(c, a, b)
    print(f"\ncompiled and ran on the CPU for n={n}: max abs error vs numpy = {error:.3g}")
    assert error < 1e-6

    c = np.full(n, np.nan, dtype="float32")
    evaluate_function(vector_add.ir, n, a, b, c)
    error = max_error(c, a, b)
    print(f"IR evaluator (second opinion) for n={n}: max abs error vs numpy = {error:.3g}")
    assert error < 1e-6


if __name__ == "__main__":
    main()
