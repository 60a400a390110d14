"""Fixtures shared by the backend plugin tests (cpu, cuda)."""
from __future__ import annotations

import pytest


@pytest.fixture
def isolated_build_cache(tmp_path, monkeypatch):
    """Point HIDET_FRAMEWORK_CACHE at a fresh directory so a test never touches (or is
    served from) the user's real cache; yields the root path. Opt in by naming it,
    or make it autouse in a sub-folder's conftest (tests/plugins/cpu does)."""
    root = tmp_path / "hf-cache"
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(root))
    yield root
