"""CPU backend test fixtures: an isolated cache for every test, the backend, and a
skip with the reason when this machine cannot build OpenMP C code."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _cpu_tests_use_isolated_cache(isolated_build_cache):
    yield isolated_build_cache


@pytest.fixture(scope="session")
def cpu_backend():
    from hidet_plugin_cpu import CpuBackend

    backend = CpuBackend()
    availability = backend.availability()
    if not availability.usable:
        pytest.skip(f"CPU backend not usable: {availability.reason}")
    return backend
