"""The CPU softmax / log_softmax kernel (cpu_rows.softmax_rows_kernel; with 512-bit
vectors the row max, ``hidet_exp_sum_f32`` over the row kept in the workspace, the
scale) against float64 numpy: every space-1 candidate of the native target, an AVX2
target built with ``-mno-avx512f`` and a 128-bit target (libm/libmvec's expf and the
element trees there), on NaN-poisoned outputs, fresh random inputs, row
lengths of 1, odd and prime lengths around the lane blocks, and the rows the exp
meets in attention: fully masked (all -inf: NaN, as numpy and onnxruntime give),
causally masked, +inf and NaN entries, huge and tiny magnitudes, probabilities that
are denormal floats."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target

LENGTHS = [1, 7, 31, 127, 129, 1000]
AVX2 = {"cores": 2, "vector_bits": 256, "fma": True, "flags": ("avx", "avx2", "fma"), "model": "test avx2"}
SSE = {"cores": 2, "vector_bits": 128, "fma": False, "flags": ("sse4_2",), "model": "test 128-bit"}


def _native_target():
    from hidet_framework.extension import plugin_host

    return plugin_host().backend_for("cpu").detect_target()


def _reference(x: np.ndarray, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = x - x.max(-1, keepdims=True)
        total = np.exp(shifted).sum(-1, keepdims=True)
        return shifted - np.log(total) if log else np.exp(shifted) / total


def _candidates(extent: int, log: bool, target_kind: str, monkeypatch):
    """(generated sources, compiled kernels) of every space-1 candidate of the CPU
    template for rows of `extent` (23 rows: blocks of 8 items with a partial one)."""
    from hidet_framework.extension import plugin_host
    from hidet_framework.lowering.pipeline import lower
    from hidet_framework.runtime.compiled_task import compile_scheduled
    from hidet_plugin_cpu.codegen import generate

    backend = plugin_host().backend_for("cpu")
    target = backend.detect_target()
    if target_kind != "native":
        from hidet_plugin_cpu import build as cpu_build

        monkeypatch.setattr(cpu_build, "CFLAGS", cpu_build.CFLAGS + ("-mno-avx512f",))
        target = Target("cpu", "x86_64", AVX2 if target_kind == "avx2" else SSE)
    x = hf.symbol((23, extent), "float32")
    y = hf.ops.log_softmax(x, -1) if log else hf.ops.softmax(x, -1)
    op = y.producer
    (template,) = plugin_host().templates.templates_for(op.name, "cpu")
    assert template.applies(op.task, op.attributes)
    out = []
    for params in template.space(target, 1):
        scheduled = template.build(op.task, op.attributes, params, target)
        source = generate(lower(scheduled.module, "cpu"))
        out.append((params, source, compile_scheduled(op.task, scheduled, backend, target)))
    return out


def _run(compiled, a: np.ndarray) -> np.ndarray:
    out = [compiled.device.from_numpy(np.full(a.shape, np.nan, np.float32))]
    compiled.run([compiled.device.from_numpy(a)], out)
    return compiled.device.to_numpy(out[0])


def _check(got: np.ndarray, a: np.ndarray, log: bool, what: str) -> None:
    """NaN exactly where numpy has it; elsewhere within 2e-6 relative, plus the rounding
    of ``x - max`` in float32 (half an ULP of |x - max|: exp turns it into a relative
    error of |x - max| * 2^-24), down to the normal range for probabilities."""
    want = _reference(a, log)
    assert got.shape == want.shape, what
    assert np.array_equal(np.isnan(got), np.isnan(want)), what
    ok = ~np.isnan(want)
    with np.errstate(invalid="ignore"):
        spread = np.minimum(np.abs(a.astype(np.float64) - a.max(-1, keepdims=True).astype(np.float64))[ok], 1e6)
    with np.errstate(invalid="ignore"):  # -inf log-probabilities of masked entries: equal counts as exact
        err = np.where(got[ok] == want[ok], 0.0, np.abs(got[ok].astype(np.float64) - want[ok]))
    if log:
        bound = 2e-6 * np.maximum(np.abs(want[ok]), 1.0) + spread * 2.0 ** -23
    else:
        bound = (2e-6 + spread * 2.0 ** -23) * np.abs(want[ok]) + 2e-38
    worst = int(np.argmax(err - bound))
    assert err[worst] <= bound[worst], (f"{what}: {got[ok][worst]!r} vs float64 {want[ok][worst]!r} "
                                        f"(|x - max| = {spread[worst]:.3g})")


def _special_rows(rng, extent: int) -> np.ndarray:
    rows = (rng.standard_normal((23, extent)) * 4).astype(np.float32)
    rows[0] = -np.inf                                       # fully masked: NaN (numpy, onnxruntime)
    for i in range(1, 9):                                   # causal masks: row i sees i keys
        rows[i, i:] = -np.inf
    rows[9, extent // 2] = np.inf                           # +inf: inf - inf, NaN (numpy, onnxruntime)
    rows[10, extent // 3] = np.nan
    rows[11] *= np.float32(1e30)                            # huge magnitudes: one-hot-ish, exact zeros
    rows[12] *= np.float32(1e-30)                           # tiny: uniform to rounding
    rows[13] = rng.uniform(-130, 0, extent).astype(np.float32)  # exp(x - max) below 2^-126: denormal probabilities
    rows[14] = np.float32(-3.0e38)                          # all equal, huge and finite
    rows[15, 0] = np.float32(3.0e38)
    return rows


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("extent", LENGTHS)
def test_native_candidates_on_random_and_special_rows(extent, log, rng, monkeypatch):
    wide = int(_native_target().get("vector_bits", 256)) >= 512
    for params, source, compiled in _candidates(extent, log, "native", monkeypatch):
        assert ("hidet_exp_sum_f32(&ebuf[" in source) == wide and ("expf(x" in source) == (not wide)
        assert ("hidet_row_max_f32(&part[0]" in source) == (wide and params["lanes"] in (8, 16, 32, 64, 128))
        for a in ((rng.standard_normal((23, extent)) * 3).astype(np.float32), _special_rows(rng, extent)):
            _check(_run(compiled, a), a, log, f"{params} extent {extent}")


@pytest.mark.parametrize("isa", ["avx2", "sse"])
@pytest.mark.parametrize("extent", [7, 129, 1000])
def test_narrower_vector_targets(isa, extent, rng, monkeypatch):
    """AVX2 code (lanes 8, 16, 32) and a 128-bit target (lanes 4) take the exp pass of
    libm/libmvec's expf and the element trees (the vector helpers measured slower with
    AVX2), and compute the same."""
    for params, source, compiled in _candidates(extent, False, isa, monkeypatch):
        assert "hidet_row_max_f32(" not in source and "hidet_exp_sum_f32(" not in source and "expf(x" in source
        a = _special_rows(rng, extent)
        _check(_run(compiled, a), a, False, f"{isa} {params} extent {extent}")


def test_graph_at_the_model_shapes(rng):
    """BERT's and GPT-2's scores at sequence 128, batch 1 (12 heads of 128 x 128; GPT-2
    causally masked with -inf), through a compiled graph (space 0, the default)."""
    x = hf.symbol((1, 12, 128, 128), "float32")
    fn = hf.compile(hf.trace(hf.ops.softmax(x, -1), inputs=[x]), target="cpu", space=0)
    a = (rng.standard_normal((1, 12, 128, 128)) * 3).astype(np.float32)
    _check(fn(a), a, False, "bert")
    causal = np.where(np.triu(np.ones((128, 128), bool), 1), np.float32(-np.inf), a)
    got = fn(causal)
    _check(got, causal, False, "gpt-2 causal")
    assert np.all(got[..., np.triu(np.ones((128, 128), bool), 1)] == 0.0)
