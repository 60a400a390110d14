"""CPU backend tests: an isolated cache for every test (the `cpu_backend` fixture, with its
skip when this machine cannot build OpenMP C code, is in tests/plugins/conftest.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _cpu_tests_use_isolated_cache(isolated_build_cache):
    yield isolated_build_cache
