"""Fixtures of the reduce plugin tests: a plugin host holding only what they need
(the reduce and ops plugins, the cpu and cuda backends), the target to run on (cpu,
and cuda where a GPU is usable), fresh random arrays, and graph runners that compare
with float64 numpy references."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

# Tolerances on |actual - reference| <= tol * max(1, |reference|max) per dtype of the output.
TOLERANCES = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 5e-5, "float64": 1e-10}


@pytest.fixture(autouse=True)
def reduce_host(isolated_plugin_host):
    import hidet_plugin_cpu
    import hidet_plugin_cuda
    import hidet_plugin_ops
    import hidet_plugin_reduce

    with contextlib.ExitStack() as stack:
        for module, name in ((hidet_plugin_reduce, "reduce"), (hidet_plugin_ops, "ops"),
                             (hidet_plugin_cpu, "cpu"), (hidet_plugin_cuda, "cuda")):
            stack.enter_context(isolated_plugin_host.temporary_plugin(module, name))
        yield isolated_plugin_host


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def target(request):
    """Every operator test runs on the CPU, and on the GPU where one is usable."""
    return request.param


def random_array(rng, shape, dtype="float32", low=-2.0, high=2.0):
    dtype = np.dtype(dtype) if dtype != "bfloat16" else None
    if dtype is not None and dtype.kind in "iu":
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype or np.float32)


@pytest.fixture
def rand(rng):
    """``rand(shape, dtype="float32", low=-2, high=2)``: a fresh random array."""
    return lambda shape, dtype="float32", low=-2.0, high=2.0: random_array(rng, shape, dtype, low, high)


def run_graph(outputs, inputs, arrays, target="cpu", space=0, fusion=True):
    """Compile the graph of `outputs` over `inputs` and run it on `arrays` (numpy)."""
    import hidet_framework as hf

    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    fn = hf.compile(hf.trace(outs, inputs=list(inputs)), target=target, space=space, fusion=fusion)
    result = fn(*arrays)
    result = list(result) if isinstance(result, (list, tuple)) else [result]
    return [np.asarray(r) for r in result], fn


def assert_close(actual, expected, dtype, tol=None, what=""):
    actual = np.asarray(actual)
    assert actual.shape == np.shape(expected), f"{what}: shape {actual.shape} != expected {np.shape(expected)}"
    assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype} != {dtype}"
    expected = np.asarray(expected, np.float64)
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(actual, expected.astype(dtype), err_msg=what)
        return
    tol = TOLERANCES[np.dtype(dtype).name] if tol is None else tol
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=tol, atol=tol * scale, err_msg=what)


@pytest.fixture(scope="session")
def check():
    """The helpers above, for the test modules (tests run in importlib mode)."""
    import types

    return types.SimpleNamespace(run_graph=run_graph, assert_close=assert_close, TOLERANCES=TOLERANCES)
