"""The prepacked GEMV with 2-byte weight panels (cpu_half_panels.py): bfloat16 panels
whose column pairs share a 32-bit lane (widened by a shift or a mask), float16 panels
converted by vcvtph2ps (F16C / AVX-512F), both widened in registers as they are loaded.

Every run: fresh random inputs, odd and prime sizes, outputs poisoned with NaN, against
float64 numpy from the half-rounded operands under test_cpu_half_operands.py's bound; on
this machine's ISA and on AVX2 (gcc told -mno-avx512f, 8-lane vectors, 16-wide panels).
The panels are laid out here with numpy, independently of `pack_b`, whose layout the
compiled graphs check (the pack is folded at compile time, then the kernel reads it).
"""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_matmul import cpu_prepack
from hidet_plugin_matmul.cpu_gemv import CpuPrepackedMatmul, gemv_space
from hidet_plugin_matmul.cpu_half_panels import half_panels_apply
from hidet_plugin_matmul.cpu_space import target_facts

from .test_cpu_half_operands import _assert_within_bound, _avx2, _half, _poisoned, _value

GEMV = CpuPrepackedMatmul()
HALF_BYTES = 2


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh inputs every run


def _target(cpu_backend, isa: str, monkeypatch) -> Target:
    target = cpu_backend.detect_target()
    return _avx2(target, monkeypatch) if isa == "avx2" else target


def _numpy_panels(b: np.ndarray, nr: int, lanes: int, dtype: str) -> np.ndarray:
    """[K, N] half weights as [panels, K, nr] 2-byte panels, zero past N; bfloat16: in
    each group of 2 * lanes columns, storage slot 2 l + h holds column h * lanes + l."""
    k, n = b.shape
    panels = -(-n // nr)
    padded = np.zeros((k, panels * nr), b.dtype)
    padded[:, :n] = b
    if dtype == "bfloat16":
        grouped = padded.reshape(k, panels, nr // (2 * lanes), 2, lanes)   # [k, p, g, h, l]
        return np.ascontiguousarray(grouped.transpose(1, 0, 2, 4, 3).reshape(panels, k, nr))
    return np.ascontiguousarray(padded.reshape(k, panels, nr).transpose(1, 0, 2))


def _task(m: int, k: int, n: int, dtype: str, nr: int, lanes: int):
    y = cpu_prepack.matmul_prepacked(hf.symbol((m, k), dtype),
                                     cpu_prepack.pack_b(hf.symbol((k, n), dtype), nr, lanes), n, lanes)
    return y.producer.task, dict(y.producer.attributes)


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("mkn", [(1, 97, 257), (2, 129, 67), (3, 5, 1000), (4, 2053, 131), (13, 41, 97),
                                 (32, 64, 257)], ids=str)
def test_half_panel_candidates(cpu_backend, rng, dtype, isa, mkn, monkeypatch):
    """Default candidate, small K blocks with 3-row tiles (partial sums), one worker."""
    m, k, n = mkn
    target = _target(cpu_backend, isa, monkeypatch)
    nr, lanes = cpu_prepack.panel_width(target), target_facts(target)["lanes"]
    assert half_panels_apply(dtype, target, nr, lanes)
    task, attributes = _task(m, k, n, dtype, nr, lanes)
    assert [t.dtype.name for t in task.inputs] == [dtype, dtype] and GEMV.applies(task, attributes)
    a = _half(rng.standard_normal((m, k)), dtype)
    b = _half(rng.standard_normal((k, n)), dtype)
    panels = _numpy_panels(b, nr, lanes, dtype)
    space = gemv_space(target, 0, nr)
    for params in (space[0], dict(space[0], kc=16, mr=3), dict(space[0], workers=1)):
        compiled = compile_scheduled(task, GEMV.build(task, attributes, params, target), cpu_backend, target)
        c = _poisoned((m, n), dtype)
        compiled.run([a, panels], [c])
        _assert_within_bound(c, _value(a, dtype), _value(b, dtype), dtype, f"{mkn} {params}")


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_nan_and_inf_weights_propagate(cpu_backend, rng, dtype, isa, monkeypatch):
    """NaN, +inf and -inf weights give NaN and inf where numpy's float64 product does
    (an inf column meets +-inf products and NaN; a column with +inf and -inf is NaN);
    every other element within the bound."""
    m, k, n = 3, 37, 71
    target = _target(cpu_backend, isa, monkeypatch)
    nr, lanes = cpu_prepack.panel_width(target), target_facts(target)["lanes"]
    task, attributes = _task(m, k, n, dtype, nr, lanes)
    w = rng.standard_normal((k, n))
    w[5, 3], w[0, 17], w[36, 17], w[9, 40], w[10, 66] = np.nan, np.inf, -np.inf, np.inf, -np.inf
    w[:, 70] = np.inf
    a, b = _half(rng.standard_normal((m, k)), dtype), _half(w, dtype)
    a64, b64 = _value(a, dtype), _value(b, dtype)
    compiled = compile_scheduled(task, GEMV.build(task, attributes, gemv_space(target, 0, nr)[0], target),
                                 cpu_backend, target)
    c = _poisoned((m, n), dtype)
    compiled.run([a, _numpy_panels(b, nr, lanes, dtype)], [c])
    with np.errstate(invalid="ignore"):
        ref = a64 @ b64
    got = _value(c, dtype)
    special = ~np.isfinite(ref)
    assert special[:, [3, 17, 40, 66, 70]].all() and special.sum() == 5 * m
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
    finite = np.isfinite(ref).all(axis=0)
    _assert_within_bound(c[:, finite], a64, b64[:, finite], dtype, "finite columns")


def _made_target(vector_bits: int, flags: tuple) -> Target:
    return Target("cpu", "x86-64", {"cores": 2, "l1d_bytes": 32 << 10, "l2_bytes": 1 << 20, "model": "made",
                                    "vector_bits": vector_bits, "fma": True, "flags": flags})


def test_which_weights_stay_two_bytes():
    """bfloat16 on every AVX2 / AVX-512 target; float16 where vcvtph2ps exists for the
    vector width (F16C for 8 lanes, AVX-512F for 16); float32 never."""
    for bits, flags, want in ((512, ("avx2", "avx512f", "f16c"), ("bfloat16", "float16")),
                              (256, ("avx2", "f16c"), ("bfloat16", "float16")),
                              (256, ("avx2",), ("bfloat16",)),
                              (512, ("avx2", "f16c"), ("bfloat16",))):
        t = _made_target(bits, flags)
        nr, lanes = cpu_prepack.panel_width(t), target_facts(t)["lanes"]
        got = tuple(d for d in ("bfloat16", "float16", "float32") if half_panels_apply(d, t, nr, lanes))
        assert got == want, (bits, flags)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(1, 331), (4, 331), (7, 331), (2, 3, 331), (32, 331)], ids=str)
def test_compiled_graph_keeps_two_byte_weights(rng, dtype, shape):
    """hf.compile(dtype=...) of x @ W + bias with constant W (K 331, N 523, prime): the
    GEMV serves it, the folded panels take 2 bytes a weight (the pack's layout, read by
    the kernel), results within the bound plus the add's rounding."""
    k, n = shape[-1], 523
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    x = hf.symbol(shape, "float32")
    fn = hf.compile(hf.trace(hf.ops.add(hf.ops.matmul(x, hf.constant(w)), hf.constant(bias)), inputs=[x]),
                    target="cpu", dtype=dtype)
    assert [t.scheduled.source for t in fn.tasks] == ["matmul.cpu_gemv"]
    target = cpu_prepack._cpu_target()
    nr = cpu_prepack.panel_width(target)
    weight_bytes = fn.memory_report().weight_bytes
    assert weight_bytes == -(-n // nr) * nr * k * HALF_BYTES + n * HALF_BYTES, weight_bytes
    a = _half(rng.standard_normal(shape), dtype)
    a64 = _value(a, dtype).reshape(-1, k)
    w64, b64 = _value(_half(w, dtype), dtype), _value(_half(bias, dtype), dtype)
    got = _value(np.asarray(fn(a)), dtype).reshape(-1, n)
    unit = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    ref = a64 @ w64 + b64
    bound = 2 * unit * (np.abs(a64 @ w64) + np.abs(b64)) + 2 * k * 2.0 ** -24 * (np.abs(a64) @ np.abs(w64))
    assert not np.isnan(got).any()
    assert np.all(np.abs(got - ref) <= bound), f"worst {np.max(np.abs(got - ref) / bound):.3g} x the bound"
