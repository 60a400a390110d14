"""What the tests of the CPU pool and depthwise templates do alike: the target of an ISA
(this machine's, or AVX2's with gcc told so), the channel-blocked form of an NCHW array,
and every candidate of a space built, run with NaN-poisoned outputs and compared."""
from __future__ import annotations

import numpy as np

from hidet_framework.backend.contract import Target
from hidet_framework.runtime.compiled_task import compile_scheduled

ISAS = ["native", "avx2"]


def isa_target(cpu_backend, isa, monkeypatch):
    """``"native"``: this machine's target; ``"avx2"``: the same with 256-bit vectors, and
    gcc told ``-mno-avx512f`` for the rest of the test (it would use AVX-512 otherwise)."""
    native = cpu_backend.detect_target()
    if isa == "native":
        return native
    from hidet_plugin_cpu import build

    monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
    return Target("cpu", native.arch, {**native.properties, "vector_bits": 256})


def block(a, lanes):
    """NCHW (C a multiple of lanes) -> [N, C/L, H, W, L]."""
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // lanes, lanes, h, w).transpose(0, 1, 3, 4, 2))


def check_candidates(cpu_backend, template, task, attributes, space, target, inputs, out_shape, compare):
    """Every candidate of `space` built by `template`, run on `inputs` into an output
    poisoned with NaN: every element written, and ``compare(out, params)``."""
    for params in space:
        compiled = compile_scheduled(task, template.build(task, attributes, params, target), cpu_backend, target)
        out = np.full(out_shape, np.nan, np.float32)
        compiled.run(inputs, [out])
        assert not np.isnan(out).any(), f"{params}: an output element was never written"
        compare(out, params)
