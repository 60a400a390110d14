"""Large outputs the caller has dropped are handed out again by the next call
(runtime/direct_binding.py, DirectBinding._fresh_outputs); an output anybody still
refers to — a variable, a view, an input of the call — is never overwritten."""
from __future__ import annotations

import gc

import numpy as np

import hidet_framework as hf
from hidet_framework.runtime.direct_binding import RECYCLE_BYTES

N = RECYCLE_BYTES // 4 + 1031   # float32 elements: just past the recycling size


def _graph(n=N):
    x = hf.symbol((n,), "float32")
    return hf.compile(hf.trace(hf.ops.tanh(hf.ops.mul(x, 0.5)), inputs=[x]), target="cpu", space=0)


def _want(a):
    return np.tanh(a.astype(np.float64) * 0.5)


def test_dropped_output_is_reused_and_correct(rng):
    fn = _graph()
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    y = fn(a)
    address = y.ctypes.data
    np.testing.assert_allclose(y, _want(a), rtol=1e-5, atol=1e-6)
    del y
    gc.collect()
    z = fn(b)
    assert z.ctypes.data == address      # the dropped array came back
    np.testing.assert_allclose(z, _want(b), rtol=1e-5, atol=1e-6)


def test_held_results_views_and_inputs_are_never_overwritten(rng):
    fn = _graph()
    a, b, c = (rng.standard_normal(N).astype(np.float32) for _ in range(3))
    held = fn(a)
    view = fn(b)[5:50]                    # the array itself dropped, a view of it kept
    chained = fn(fn(c))                   # a result passed straight back in as the input
    again = fn(c)
    np.testing.assert_allclose(held, _want(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(view, _want(b)[5:50], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(chained, _want(_want(c).astype(np.float32)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(again, _want(c), rtol=1e-5, atol=1e-6)
    addresses = {x.ctypes.data for x in (held, again, chained)} | {view.base.ctypes.data}
    assert len(addresses) == 4


def test_small_outputs_are_fresh_every_call(rng):
    n = 1009
    fn = _graph(n)
    a = rng.standard_normal(n).astype(np.float32)
    outs = [fn(a) for _ in range(3)]
    for y in outs:
        np.testing.assert_allclose(y, _want(a), rtol=1e-5, atol=1e-6)
    assert fn._direct is None or not getattr(fn._direct, "_spares", {})
