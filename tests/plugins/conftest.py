"""Fixtures shared by the plugin tests: an isolated build cache, fresh random numbers, the
CPU backend, the GPU (the CUDA matmul and conv tests)."""
from __future__ import annotations

import os

import numpy as np
import pytest


@pytest.fixture
def isolated_build_cache(tmp_path, monkeypatch):
    """Point HIDET_FRAMEWORK_CACHE at a fresh directory so a test never touches (or is
    served from) the user's real cache; yields the root path. Opt in by naming it,
    or make it autouse in a sub-folder's conftest (tests/plugins/cpu does)."""
    root = tmp_path / "hf-cache"
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(root))
    yield root


@pytest.fixture
def rng(request):
    """Fresh random inputs every run; the seed is printed (shown when the test fails)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed} for {request.node.name}")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def cpu_backend():
    """The CPU backend, or a skip naming why this machine cannot build OpenMP C code."""
    from hidet_plugin_cpu import CpuBackend

    backend = CpuBackend()
    availability = backend.availability()
    if not availability.usable:
        pytest.skip(f"CPU backend not usable: {availability.reason}")
    return backend


@pytest.fixture(scope="module")
def cuda_env():
    """(backend, detected target, torch) of a usable GPU."""
    from hidet_plugin_cuda import CudaBackend

    backend = CudaBackend()
    if not backend.availability():
        pytest.skip(f"no usable CUDA GPU: {backend.availability().reason}")
    torch = pytest.importorskip("torch")
    return backend, backend.detect_target(), torch
