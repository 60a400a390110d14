"""bfloat16 rounding of ties (to even) in all three places that round — the runtime's
scalar conversion, the code generator's constant folding and the generated C — and
zero-size broadcasting. Written to kill the mutation-testing survivors named in
issue 12."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.c_style_expr import _round_half
from hidet_framework.ir import BufferStoreStmt, ForStmt, Function, module, tensor_type, var
from hidet_framework.lowering.pipeline import lower
from hidet_framework.graph.tensor import ShapeError
from hidet_plugin_cpu.runtime import _bfloat16_bits

# float32 bit patterns around bf16 ties: exactly halfway, one ulp either side, both parities
PATTERNS = [0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x3F817FFF, 0x3F818001, 0xBF808000, 0xBF818000,
            0x7F7F8000, 0x00008000, 0x00018000, 0x3F800000, 0x7F7FFFFF, 0x00000000, 0x80000000, 0x7F800000]


def nearest_even_bf16(bits: int) -> int:
    """The reference, by distances in float64 (not the bit trick under test)."""
    value = float(np.array(bits, np.uint32).view(np.float32))
    lo = bits >> 16
    candidates = [lo, lo + 1]

    def as_float(b):
        if (b & 0x7F80) == 0x7F80:  # infinity rounds like 2^128, the next binade (IEEE 754)
            return -(2.0**128) if b & 0x8000 else 2.0**128
        return float(np.array((b & 0xFFFF) << 16, np.uint32).view(np.float32))

    if np.isinf(value):
        return lo
    dist = [abs(as_float(b) - value) for b in candidates]
    if dist[0] < dist[1]:
        return lo
    if dist[1] < dist[0]:
        return lo + 1
    return lo if lo % 2 == 0 else lo + 1


def _f32(bits: int) -> float:
    return float(np.array(bits, np.uint32).view(np.float32))


@pytest.mark.parametrize("bits", PATTERNS, ids=hex)
def test_runtime_scalar_rounding(bits):
    assert _bfloat16_bits(_f32(bits)) == nearest_even_bf16(bits)


@pytest.mark.parametrize("bits", PATTERNS, ids=hex)
def test_constant_folding_rounding(bits):
    assert _round_half(_f32(bits), "bfloat16") == _f32(nearest_even_bf16(bits) << 16)


def test_runtime_keeps_nan_a_quiet_nan():
    for bits in (0x7FC00000, 0x7F800001, 0xFFC00001):
        out = _bfloat16_bits(_f32(bits))
        assert (out & 0x7F80) == 0x7F80 and (out & 0x7F) != 0  # still a NaN after truncation


def test_generated_c_rounds_ties_to_even(cpu_backend):
    n = len(PATTERNS)
    a, c, i = var("a", tensor_type("float32", [n])), var("c", tensor_type("bfloat16", [n])), var("i")
    fn = Function("to_bf16", [a, c], ForStmt(i, n, BufferStoreStmt(c, [i], a[i])))
    lib = cpu_backend.compile(lower(module("bf16_ties", [fn]), "cpu"))
    x = np.array(PATTERNS, np.uint32).view(np.float32)
    out = np.full(n, 0x7FC0, np.uint16)
    lib["to_bf16"](x, out)
    assert [hex(v) for v in out] == [hex(nearest_even_bf16(b)) for b in PATTERNS]


@pytest.mark.parametrize("a, b, want", [((0, 3), (1, 3), (0, 3)), ((1,), (0,), (0,)), ((0,), (1,), (0,)),
                                         ((2, 0), (2, 1), (2, 0)), ((0, 1), (1, 0), (0, 0)), ((3,), (0, 3), (0, 3))])
def test_zero_size_broadcasting_follows_numpy(a, b, want):
    assert np.broadcast_shapes(a, b) == want
    out = hf.ops.add(hf.symbol(a), hf.symbol(b))
    assert out.shape == want


@pytest.mark.parametrize("a, b", [((0,), (3,)), ((2, 0), (2, 3)), ((0, 2), (3, 2))])
def test_zero_against_a_larger_extent_is_refused(a, b):
    with pytest.raises(ShapeError, match="cannot broadcast"):
        hf.ops.add(hf.symbol(a), hf.symbol(b))


def test_zero_size_add_runs(rng):
    x, y = hf.symbol((0, 3)), hf.symbol((1, 3))
    fn = hf.compile(hf.trace(hf.ops.add(x, y), inputs=[x, y]), target="cpu")
    out = fn(np.zeros((0, 3), np.float32), rng.standard_normal((1, 3)).astype(np.float32))
    assert out.shape == (0, 3) and out.dtype == np.float32
