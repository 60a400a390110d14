"""Fixtures of the ops plugin tests: the plugin registered in an isolated plugin host
(nothing installed leaks in), the graph runner, and random arrays drawn from the
`rng` of tests/plugins/conftest.py."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_runner():
    # tests run in importlib mode (no sys.path entry for this folder): load by path
    spec = importlib.util.spec_from_file_location("ops_test_graph_runner", os.path.join(_HERE, "graph_runner.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_RUNNER = _load_runner()


@pytest.fixture(scope="session")
def runner():
    """graph_runner.py: run_with_evaluator, run_compiled, run, assert_close."""
    return _RUNNER


@pytest.fixture(autouse=True)
def ops_host(isolated_plugin_host):
    """A plugin host holding only hidet_plugin_ops (plus the cpu and cuda backends
    once the driver exists, for the compiled path), for the duration of one test."""
    import contextlib

    import hidet_plugin_ops

    with contextlib.ExitStack() as stack:
        stack.enter_context(isolated_plugin_host.temporary_plugin(hidet_plugin_ops, "ops"))
        if _RUNNER.compile_available():
            for name in ("cpu", "cuda"):
                backend = pytest.importorskip(f"hidet_plugin_{name}")
                stack.enter_context(isolated_plugin_host.temporary_plugin(backend, name))
        yield isolated_plugin_host


@pytest.fixture(autouse=True, params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def op_target(request):
    """Every operator test runs on the CPU, and again on the GPU where one is usable
    (``pytest -m cuda`` on the GPU machine runs the cuda pass)."""
    _RUNNER.DEFAULT_TARGET = request.param
    yield request.param
    _RUNNER.DEFAULT_TARGET = "cpu"


def random_array(rng, shape, dtype="float32", low=-2.0, high=2.0):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(int(low) if dtype.kind == "i" else 0, int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


@pytest.fixture
def rand(rng):
    """``rand(shape, dtype="float32", low=-2, high=2)``: a fresh random array."""
    return lambda shape, dtype="float32", low=-2.0, high=2.0: random_array(rng, shape, dtype, low, high)


def pytest_report_header(config):
    return ["ops tests: graphs run on " + ("hf.compile (cpu)" if _RUNNER.compile_available()
                                           else "the IR evaluator") + " when the driver probe passes"]
