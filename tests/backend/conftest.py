"""Fixtures for the core backend tests: every test gets its own build cache root."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_build_cache(tmp_path, monkeypatch):
    """Point HIDET_FRAMEWORK_CACHE at a fresh directory so tests never touch (or are
    served from) the user's real cache; yields the root path."""
    root = tmp_path / "hf-cache"
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(root))
    yield root
