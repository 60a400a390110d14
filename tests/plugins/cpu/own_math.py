"""What the tests of our own float32 math functions share (test_own_tanh.py,
test_own_erf.py; ``hidet_plugin_cpu/vector_math.py``): building a one-call kernel
natively or for AVX2, the ULP sweep against a float64 reference, running special
values on poisoned outputs, where the definition is placed in a source, and the
coefficient tables as numbers. Each test file keeps its own kernels (script
functions are parsed from their source file) and what is particular to its function.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from hidet_framework.lang import script_module
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_cpu import vector_math
from hidet_plugin_cpu.codegen import generate

from .test_vector_math import _prime_length, float_range_sample, ulp_error

ISAS = ["native", "avx2"]  # the AVX2 build (gcc told -mno-avx512f): gcc makes a different SIMD clone


def build(kernel: Any, name: str, cpu_backend: Any, isa: str, monkeypatch: Any) -> tuple[str, Any]:
    """(generated source, loaded library) of `kernel` as module `name`_`isa`."""
    if isa == "avx2":
        from hidet_plugin_cpu import build as cpu_build

        monkeypatch.setattr(cpu_build, "CFLAGS", cpu_build.CFLAGS + ("-mno-avx512f",))
    module = lower(script_module(kernel, name=f"{name}_{isa}"), "cpu")
    return generate(module), cpu_backend.compile(module)


def run(library: Any, kernel: str, values: np.ndarray, poison: float = np.nan) -> np.ndarray:
    """`kernel`(n, a, c) on `values`, into an output filled with `poison` first."""
    out = np.full_like(values, poison)
    library[kernel](len(values), values, out)
    return out


def check_ulp_sweep(library: Any, kernel: str, function: str, reference: Callable[[np.ndarray], np.ndarray],
                    rng: np.random.Generator, bends: float, worst: tuple[float, float, int]) -> np.ndarray:
    """Every binade of the float range (both signs, denormals, special values), 200,000
    uniform draws in [-bends, bends] and a dense linspace(*worst) over the worst
    region, at a prime length (vector lanes and a scalar tail): the largest error is
    within ``vector_math.ULP_BOUNDS[function]``, the mean under 1 ULP. Returns the
    results (the caller checks what is particular to its function)."""
    a = _prime_length(np.concatenate([float_range_sample(rng), rng.uniform(-bends, bends, 200_000).astype(np.float32),
                                      np.linspace(*worst[:2], worst[2], dtype=np.float32)]))
    c = run(library, kernel, a)
    with np.errstate(over="ignore"):  # the largest binades overflow float64 too: inf, the float32 answer
        want = reference(a.astype(np.float64))
    err = ulp_error(c, want)
    at = int(np.argmax(err))
    bound = vector_math.ULP_BOUNDS[function]
    assert err[at] <= bound, f"{function}({a[at]!r}) = {c[at]!r}, float64 says {want[at]!r}: {err[at]:.3g} ULP"
    assert np.mean(err[np.isfinite(err)]) < 1.0  # typical results are within rounding
    return c


def check_defined_only_where_called(with_call: Any, without_call: Any, definition: str) -> tuple[str, str]:
    """The sources of a kernel calling the function and of one that does not: the
    first holds `definition` (``static inline float hidet_xf(float x)``) once, after
    the includes and before the prototypes; the second none of it. Returns both."""
    with_source = generate(lower(script_module(with_call, name="with_call"), "cpu"))
    without = generate(lower(script_module(without_call, name="without_call"), "cpu"))
    name = definition.split("(")[0].split()[-1]
    assert with_source.count(definition) == 1 and name not in without
    assert with_source.index("#include <math.h>") < with_source.index(definition) < with_source.index(
        "/* prototypes */")
    return with_source, without


def coefficients(table: Any) -> list[float]:
    """A coefficient table of vector_math (C float literals) as numbers."""
    return [float(c.rstrip("f")) for c in table]
