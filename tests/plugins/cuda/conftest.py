"""Fixtures of the CUDA backend tests.

Compile-only tests (marker ``nvcc``) need NVRTC or nvcc but no GPU; runtime tests
(marker ``cuda``) skip, with the backend's own reason, where no GPU is usable.
"""
from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_sources():
    # tests run in importlib mode (no sys.path entry for this folder): load by path
    spec = importlib.util.spec_from_file_location("cuda_test_kernel_sources", os.path.join(_HERE, "kernel_sources.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def kernels():
    """The hand-written kernel sources (kernel_sources.py)."""
    return _load_sources()


@pytest.fixture
def tmp_cache(isolated_build_cache):
    """A private, empty build cache for this test."""
    return isolated_build_cache


def _nvrtc_reason() -> str | None:
    try:
        from hidet_plugin_cuda.nvrtc_build import nvrtc_version

        nvrtc_version()
        return None
    except Exception as exc:
        return f"NVRTC unusable: {exc}"


@pytest.fixture(params=["nvrtc", "nvcc"])
def compiler(request):
    """Each CUDA compiler in turn, skipping one that is not installed."""
    if request.param == "nvrtc":
        reason = _nvrtc_reason()
        if reason:
            pytest.skip(reason)
    elif shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    return request.param


@pytest.fixture(scope="session")
def cuda_backend():
    """A usable CudaBackend, or skip saying why there is none."""
    from hidet_plugin_cuda import CudaBackend

    backend = CudaBackend()
    available = backend.availability()
    if not available:
        pytest.skip(f"no usable CUDA GPU: {available.reason}")
    return backend
