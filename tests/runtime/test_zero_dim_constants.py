"""A 0-d constant (an ONNX scalar initializer, e.g. GPT-2's attention scale) reaches
the kernels as a 0-d buffer on every target: ``np.ascontiguousarray`` once made it 1-d
on its way to the GPU, and the CUDA launcher refused the (1,)-shaped array."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf


@pytest.mark.parametrize("target", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("fusion", [True, False])
def test_matmul_times_a_zero_dim_constant(target, fusion, rng):
    x = hf.symbol((5, 7), "float32")
    w = rng.standard_normal((7, 3)).astype(np.float32)
    scale = np.array(0.125, dtype=np.float32)
    y = hf.ops.mul(hf.ops.matmul(x, hf.constant(w)), hf.constant(scale))
    fn = hf.compile(hf.trace(y, inputs=[x]), target=target, fusion=fusion)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    out = np.asarray(fn(a))
    np.testing.assert_allclose(out, (a.astype(np.float64) @ w) * 0.125, rtol=1e-5, atol=1e-6)
